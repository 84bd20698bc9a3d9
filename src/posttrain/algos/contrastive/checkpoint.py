"""What a contrastive checkpoint holds, and loading it back — adapters AND projection head, or a clear error.

    checkpoint-N/
      adapter_model.safetensors, adapter_config.json   PEFT LoRA adapters (PeftModel.save_pretrained)
      projection_head.safetensors                      the head's tensors
      contrastive.json                                 head shape + the base it was trained on (JSON, no pickle)
      optimizer.pt, scheduler.pt, rng_state.pth, trainer_state.json   (HF Trainer: optimizer/schedule/RNG/step)

Loading refuses a checkpoint without a head, with missing adapter tensors, a head of another shape, or one
trained on another base (tiny random-init bases are identified by model name and seed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from peft import set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from posttrain.errors import CheckpointError

ADAPTER_FILE = "adapter_model.safetensors"
HEAD_FILE = "projection_head.safetensors"
META_FILE = "contrastive.json"


def base_identity(cfg: DictConfig) -> dict[str, Any]:
    """The base model a checkpoint's adapters belong to (a tiny model is random init: its seed matters)."""
    ident: dict[str, Any] = {"model": cfg.model.name}
    if cfg.model.tiny:
        ident["seed"] = cfg.seed
    return ident


def save_weights(
    model: torch.nn.Module, out_dir: str | Path, cfg: DictConfig, state_dict: dict[str, torch.Tensor] | None = None
) -> None:
    """Adapters, head and their metadata; `state_dict`: the model's whole state dict gathered from a sharded
    engine's ranks (FSDP, ZeRO-3), where the parameters on this process are shards."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lm_state = head_state = None
    if state_dict is not None:
        lm_state = {k.removeprefix("lm."): v for k, v in state_dict.items() if k.startswith("lm.")}
        head_state = {k.removeprefix("head."): v for k, v in state_dict.items() if k.startswith("head.")}
    model.lm.save_pretrained(str(out), safe_serialization=True, state_dict=lm_state)
    head_state = head_state if head_state is not None else model.head.state_dict()
    head_state = {k: v.detach().cpu().contiguous() for k, v in head_state.items()}
    save_file(head_state, str(out / HEAD_FILE), metadata={"format": "pt"})
    (out / META_FILE).write_text(json.dumps({"head": model.head.spec(), "base": base_identity(cfg)}, indent=2))


def load_weights(model: torch.nn.Module, ckpt_dir: str | Path, cfg: DictConfig) -> None:
    """Copy adapters and head from `ckpt_dir` into `model` (same devices/dtypes as the model's)."""
    ckpt = Path(ckpt_dir)
    for name in (ADAPTER_FILE, HEAD_FILE, META_FILE):
        if not (ckpt / name).is_file():
            what = "projection head" if name == HEAD_FILE else name
            raise CheckpointError(f"{ckpt}: no {what} ({name}); a contrastive checkpoint holds adapters and head")
    meta = json.loads((ckpt / META_FILE).read_text())
    if meta.get("base") != base_identity(cfg):
        raise CheckpointError(f"{ckpt}: trained on base {meta.get('base')}, this run uses {base_identity(cfg)}")
    if meta.get("head") != model.head.spec():
        raise CheckpointError(f"{ckpt}: projection head {meta.get('head')} != configured {model.head.spec()}")

    adapter_state = load_file(str(ckpt / ADAPTER_FILE))
    expected = {k for k in model.lm.state_dict() if "lora_" in k}
    result: Any = set_peft_model_state_dict(model.lm, adapter_state)  # torch's _IncompatibleKeys
    missing = sorted(k for k in result.missing_keys if "lora_" in k)
    n_lora = sum("lora_" in k for k in adapter_state)  # PEFT may also save e.g. an lm_head base weight
    if missing or result.unexpected_keys or n_lora != len(expected):
        raise CheckpointError(
            f"{ckpt}: adapters do not match the model (missing {missing[:3]}, unexpected "
            f"{list(result.unexpected_keys)[:3]}, {n_lora} LoRA tensors for {len(expected)} LoRA weights)"
        )
    head_state = load_file(str(ckpt / HEAD_FILE))
    try:
        model.head.load_state_dict(head_state, strict=True)
    except RuntimeError as ex:
        raise CheckpointError(f"{ckpt}: projection head does not load: {str(ex).splitlines()[0]}") from None
