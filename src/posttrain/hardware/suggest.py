"""What would fit: command-line overrides found by re-planning changed copies of the config.

Changes are tried from the least to the most invasive (GPT-OSS's experts kept in MXFP4, checkpointing, the rollout
engine sampling from the policy instead of a copy or a static cache, a kernel that
keeps no `[tokens, V]` logits, smaller micro-batches at the same global batch, an 8-bit optimizer, LoRA instead of
full fine-tuning, vLLM as a server, QLoRA) and accumulated greedily until the plan fits; the ones the fit does not
need are dropped again. When no change on this hardware fits, every profile whose own plan (the same command line
with `hw=<that profile>`, its hw.* keys dropped) fits is named, with the figures that plan prints.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.config.auto_hw import AUTO
from posttrain.config.compose import override_keys
from posttrain.hardware.memory import GIB, Plan, plan
from posttrain.hardware.profile import has_bitsandbytes
from posttrain.paths import HW_DIR
from posttrain.training_args import gradient_checkpointing

Change = tuple[str, Callable[[DictConfig], None]]


def _set(key: str, value) -> Callable[[DictConfig], None]:
    def apply(cfg: DictConfig) -> None:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, value, merge=False)

    return apply


def _candidates(cfg: DictConfig, current: Plan) -> Iterator[Change]:
    hw, model, work = cfg.hw, cfg.model, current.work
    if model.quantization == "mxfp4" and model.mxfp4 != "native" and not model.lora.experts:
        # the checkpoint's own MXFP4 experts instead of their bf16 dequantization: the same weights, 3x smaller
        yield "model.mxfp4=native", _set("model.mxfp4", "native")
    if not gradient_checkpointing(cfg):
        yield "model.gradient_checkpointing=true", _set("model.gradient_checkpointing", True)
    cheap = [o for o in work.memory_options if o.startswith("algo.generation.backend=")]
    for option in cheap:  # the rollout engine's own memory (a merged copy, a static cache) is the cheapest to give up
        key, _, value = option.partition("=")
        yield option, _set(key, yaml.safe_load(value))
    logits = next((i for i in current.items if i.name == "logits"), None)
    if work.kernels_apply and cfg.kernels.backend in ("trl", "eager") and logits and logits.bytes > 0:
        # ours, the fastest measured: CPU (experiments/kernels) and one H200 (experiments/gpu: 1.2-1.7x two bf16 GEMMs,
        # TRL chunked 1.7-2.1x, Liger 28-31x); TPU: Pallas
        backend = "pallas" if hw.device == "xla" else "fused"
        yield f"kernels={backend}", _set("kernels.backend", backend)
    batch, accum = int(cfg.trainer.per_device_batch_size), int(cfg.trainer.grad_accum)
    while batch > 1:
        batch //= 2
        accum *= 2
        # same global batch in smaller micro-batches, still a multiple of the algorithm's batch unit
        if (batch * accum * hw.num_devices) % work.batch_multiple == 0:
            yield (
                f"trainer.per_device_batch_size={batch} trainer.grad_accum={accum}",
                _both(_set("trainer.per_device_batch_size", batch), _set("trainer.grad_accum", accum)),
            )
    if hw.device == "cuda" and "8bit" not in hw.optimizer and has_bitsandbytes():
        yield "hw.optimizer=paged_adamw_8bit", _set("hw.optimizer", "paged_adamw_8bit")
    if not model.lora.enabled and work.train_mode != "frozen":
        yield "model.lora.enabled=true", _set("model.lora.enabled", True)
    for option in (o for o in work.memory_options if o not in cheap):
        key, _, value = option.partition("=")
        yield option, _set(key, yaml.safe_load(value))
    if hw.device == "cuda" and model.family != "gpt_oss" and model.quantization is None:
        yield (
            "model.quantization=bnb4 model.lora.enabled=true",
            _both(_set("model.quantization", "bnb4"), _set("model.lora.enabled", True)),
        )


def _both(*fns: Callable[[DictConfig], None]) -> Callable[[DictConfig], None]:
    def apply(cfg: DictConfig) -> None:
        for fn in fns:
            fn(cfg)

    return apply


def _with(cfg: DictConfig, changes: list[Change]) -> DictConfig:
    new = copy.deepcopy(cfg)
    for _, fn in changes:
        fn(new)
    return new


def _merge_changes(changes: list[Change]) -> list[Change]:
    """Later batch changes replace earlier ones."""
    out: list[Change] = []
    for change in changes:
        if change[0].startswith("trainer.per_device_batch_size"):
            out = [c for c in out if not c[0].startswith("trainer.per_device_batch_size")]
        out.append(change)
    return out


def command_line() -> list[str] | None:
    """The overrides `python train.py` was given (None outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def _on_profile(overrides: Sequence[str], name: str, num_devices: int) -> list[str]:
    """`overrides` moved to profile `name`: the hw choice and hw.* keys replaced (the device count kept)."""
    keep = [o for o in overrides if next(iter(override_keys([o])), "").split(".")[0] != "hw"]
    return [*keep, f"hw={name}", *([f"hw.num_devices={num_devices}"] if num_devices != 1 else [])]


def _other_hw(cfg: DictConfig, overrides: Sequence[str]) -> list[tuple[str, Plan]]:
    """Every other profile (same device count) whose own plan (`_on_profile(...) mode=plan`) fits, smallest first."""
    from posttrain.config.compose import load_config
    from posttrain.hardware.profile import apply_profile

    fits = []
    for path in sorted(HW_DIR.glob("*.yaml")):
        if path.stem in (cfg.hw.name, AUTO):  # auto is one of the others, resolved
            continue
        moved = _on_profile(overrides, path.stem, int(cfg.hw.num_devices))
        other = load_config(moved)  # as `posttrain.hardware.report.profile_plan` plans it
        apply_profile(other, overrides=override_keys(moved))
        result = plan(other)
        if result.fits:
            fits.append((path.stem, result))
    return sorted(fits, key=lambda item: item[1].device_bytes)


def suggest(cfg: DictConfig, current: Plan, overrides: Sequence[str] | None = None) -> str:
    """'' when `current` fits; else the overrides that make it fit, or the profiles whose own plans fit (`overrides`:
    the command line `cfg` came from, default Hydra's; without one no profile is named)."""
    if current.fits:
        return ""
    chosen: list[Change] = []
    best = current
    for change in _candidates(cfg, current):
        trial = _merge_changes(chosen + [change])
        result = plan(_with(cfg, trial))
        if result.peak_bytes < best.peak_bytes:
            chosen, best = trial, result
        if best.fits:
            break
    if best.fits:
        for change in list(chosen):  # drop what the fit does not need
            rest = [c for c in chosen if c is not change]
            result = plan(_with(cfg, rest))
            if result.fits:
                chosen, best = rest, result
        args = " ".join(name for name, _ in chosen)
        return f"try: {args} (peak {best.peak_bytes / GIB:.1f} of {best.device_bytes / GIB:.1f} GiB)"
    need = f"needs {best.peak_bytes / GIB:.1f} GiB" + (f" even with {' '.join(n for n, _ in chosen)}" if chosen else "")
    overrides = command_line() if overrides is None else overrides
    others = _other_hw(cfg, overrides) if overrides is not None else []
    if others:
        names = ", ".join(f"hw={n} ({p.peak_bytes / GIB:.1f} of {p.device_bytes / GIB:.1f} GiB)" for n, p in others)
        return f"nothing fits {cfg.hw.name} ({need}); use {names}"
    return f"nothing fits {cfg.hw.name} ({need}); use more devices (hw.num_devices) or a smaller model"
