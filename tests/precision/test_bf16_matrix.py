"""Every algorithm trains in the precisions the hardware profiles train in (DESIGN.md, GPU: "every algorithm runs
in every precision its profiles use"), on CPU with the tiny models:

- `bf16_weights`: what every GPU profile does (conf/hw/{rtx4090,a100,a100_40gb,h200}.yaml): bf16 weights
  (`model.dtype=auto` -> bf16), the trainer's bf16 autocast, activation checkpointing, rollouts from the policy;
- `fp32_master`: what hw=cpu does on a CPU with AMX or AVX512-BF16 (`bf16_param_dtype: float32`): fp32 weights
  under bf16 autocast, forced here with `hw.precision=bf16` whatever this CPU has.

Each case builds the algorithm's trainer in-process (compose -> `apply_profile` -> `build_trainer`), trains two
optimizer steps and checks: finite losses; the matmuls ran in bf16 (a base linear layer's output, and the LM head's
where the algorithm calls it as a module); trainable tensors are fp32 master weights and every one of them moved;
every frozen tensor stayed bit-identical. The D2L Python API and `mode=eval` are checked in both precisions too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from posttrain.algos.grpo.device_defaults import device_defaults
from posttrain.algos.registry import get_algorithm
from posttrain.config.compose import load_config
from posttrain.hardware import apply_profile

GPU_PROFILES = ("rtx4090", "a100", "a100_40gb", "h200")
GPU_BACKEND = {"rtx4090": None, "a100": None, "a100_40gb": None, "h200": "static"}  # GRPO's device default
# the GPU profiles' precision settings, applied to hw=cpu (checked against the profiles below)
BF16_WEIGHTS = {
    "hw.precision": "bf16",
    "hw.bf16_param_dtype": None,
    "hw.gradient_checkpointing": True,  # the profiles: null, on where the plan needs it; the matrix covers "on"
    "hw.bf16_attn_implementation": None,
}
PRECISIONS: dict[str, tuple[str, ...]] = {
    "bf16_weights": tuple(f"{k}={'null' if v is None else str(v).lower()}" for k, v in BF16_WEIGHTS.items()),
    "fp32_master": ("hw.precision=bf16",),  # hw=cpu's bf16_param_dtype=float32 keeps fp32 weights
}
PARAM_DTYPE = {"bf16_weights": torch.bfloat16, "fp32_master": torch.float32}
COMMON = ("trainer.max_steps=2", "trainer.lr=1e-3", "trainer.save_steps=0", "trainer.progress_bar=false")
ALGOS: dict[str, tuple[str, ...]] = {
    # every trainable tensor must move in two steps, so step 1 needs a group with unequal rewards (B moves, then A):
    # torch.multinomial's draw gives one with this seed (hw=cpu's inverse-CDF draw, another stream, does not)
    "grpo": (
        "algo=grpo",
        "trainer.per_device_batch_size=4",
        "algo.trl.num_generations=2",
        "algo.trl.max_completion_length=6",
        "algo.generation.sampler=multinomial",
    ),
    "d2l": (
        "algo=d2l",
        "data=d2l_synth",
        "data.num_train=8",
        "trainer.per_device_batch_size=2",
        "algo.eval_at_end=false",
        "algo.kl_coef=0.5",  # the in-context teacher runs too
        "algo.kl_top_k=4",
        "algo.bias_lora_rank=2",
        "algo.encoder.max_doc_length=16",  # documents read in chunks
        "algo.encoder.max_chunks=2",
    ),
    "contrastive": (
        "algo=contrastive",
        "data=contrastive_injection",
        "data.num_train=8",
        "data.num_eval=0",
        "trainer.per_device_batch_size=2",
        "algo.head_hidden_dim=32",
        "algo.proj_dim=16",
        "algo.train_head=true",  # frozen by default (invariance); trained by the detection arm: cover its precision
    ),
}
CASES = [
    *[
        pytest.param("grpo", model, precision, kernels, id=f"grpo-{model}-{precision}-{kernels}")
        for model in ("tiny_llama", "tiny_gpt_oss")
        for precision in PRECISIONS
        for kernels in ("trl", "fused")
    ],
    *[
        pytest.param(algo, model, precision, None, id=f"{algo}-{model}-{precision}")
        for algo in ("d2l", "contrastive")
        for model in ("tiny_llama", "tiny_gpt_oss")
        for precision in PRECISIONS
    ],
]


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def profiled_config(*overrides: str) -> DictConfig:
    """Compose and apply the hw profile as `python train.py <overrides>` does (command-line keys win)."""
    cfg = load_config(list(overrides))
    apply_profile(cfg, {o.split("=", 1)[0] for o in overrides})
    return cfg


def trainable_groups(algo: str, model: Any) -> dict[str, list[str]]:
    """What must train, by part: each part must hold at least one tensor."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]

    def having(*parts: str) -> list[str]:
        return [n for n in names if any(p in n for p in parts)]

    groups = {"lora_A": having("lora_A"), "lora_B": having("lora_B")}
    if algo == "contrastive":
        groups["projection head"] = having("head.net.")
    if algo == "d2l":
        groups = {
            "heads": having("hypernet.head_A", "hypernet.head_B"),
            "scalers": having("hypernet.scale_A", "hypernet.scale_B"),
            "bias LoRA": having("hypernet.bias_A", "hypernet.bias_B"),
            "Perceiver": having("hypernet.blocks."),
            "aggregator queries and input": having("hypernet.queries", "hypernet.in_proj", "hypernet.in_norm"),
        }
        assert set(names) == {f"hypernet.{n}" for n, _ in model.hypernet.named_parameters()}
    else:
        assert set(names) == {n for part in groups.values() for n in part}, "a trainable tensor outside LoRA / the head"
    return groups


def output_dtypes(modules: dict[str, torch.nn.Module]) -> tuple[dict[str, set[torch.dtype]], list]:
    seen: dict[str, set[torch.dtype]] = {name: set() for name in modules}

    def hook(name: str):
        return lambda _m, _i, out: seen[name].add(out.dtype)

    return seen, [m.register_forward_hook(hook(name)) for name, m in modules.items()]


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_the_bf16_weights_case_is_what_the_gpu_profiles_train_in(profile):
    for algo in ALGOS:
        cfg = load_config([f"hw={profile}", f"algo={algo}"])
        expected = {**BF16_WEIGHTS, "hw.gradient_checkpointing": None}
        assert {key: OmegaConf.select(cfg, key) for key in BF16_WEIGHTS} == expected
        # the generation backend is the matrix's own axis (hf here; h200's static copy: tests/rollout)
        assert device_defaults(cfg.hw).generation_backend == GPU_BACKEND[profile]


@pytest.mark.parametrize("algo, model_name, precision, kernels", CASES)
def test_two_steps_train_in_the_profiles_precision(tmp_path: Path, algo, model_name, precision, kernels):
    overrides = [f"model={model_name}", *ALGOS[algo], *PRECISIONS[precision], *COMMON]
    if algo == "grpo" and precision == "bf16_weights":  # the GPU profiles' (but h200's): sampling from the policy
        overrides.append("algo.generation.backend=hf")
    if kernels:
        overrides.append(f"kernels={kernels}")
    cfg = profiled_config(*overrides)
    assert cfg.hw.precision == "bf16" and cfg.model.dtype == ("float32" if precision == "fp32_master" else "auto")
    trainer = get_algorithm(algo).build_trainer(cfg, tmp_path, [])
    assert trainer.args.bf16 and trainer.accelerator.mixed_precision == "bf16"
    model = trainer.accelerator.unwrap_model(trainer.model)
    lm = model.base if algo == "d2l" else (model.causal_lm if algo == "contrastive" else model.get_base_model())
    base_linear = dict(lm.named_modules())["model.layers.0.self_attn.q_proj.base_layer"]
    assert base_linear.weight.dtype == PARAM_DTYPE[precision]
    watched = {"base linear": base_linear}
    if algo != "grpo":  # GRPO's loss kernels read the head's weight, they do not call it
        watched["lm head"] = lm.get_output_embeddings()
    seen, hooks = output_dtypes(watched)
    groups = trainable_groups(algo, model)
    assert all(groups.values()), {k: len(v) for k, v in groups.items()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    try:
        trainer.train()
    finally:
        for h in hooks:
            h.remove()

    assert trainer.state.global_step == 2
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses
    assert all(dtypes == {torch.bfloat16} for dtypes in seen.values()), seen
    params = dict(model.named_parameters())
    trainable = {n for n, p in params.items() if p.requires_grad}
    assert {str(params[n].dtype) for n in trainable} == {"torch.float32"}  # fp32 master weights
    unmoved = sorted(n for n in trainable if torch.equal(params[n].detach(), before[n]))
    assert not unmoved, unmoved
    moved_frozen = sorted(n for n in params.keys() - trainable if not torch.equal(params[n].detach(), before[n]))
    assert not moved_frozen, moved_frozen


def test_d2l_teacher_computes_in_the_training_precision(tmp_path: Path, monkeypatch):
    """The in-context teacher runs in `Trainer.__init__`, outside the autocast of the model's forward: the trainer
    gives it the same autocast, and the cache keeps fp32 and bf16-autocast numbers of the same fp32 weights apart."""
    from posttrain.algos.d2l import api

    build, seen = api.build_model, set()

    def build_and_watch(cfg):
        model = build(cfg)
        model.base.get_output_embeddings().register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        return model

    monkeypatch.setattr(api, "build_model", build_and_watch)
    caches = tmp_path / "cache"
    # the same model config in both runs (the cache key holds it): only the autocast differs
    model = ("model=tiny_llama", "model.dtype=float32", "model.attn_implementation=eager")
    base = (*model, *ALGOS["d2l"], "data.num_train=4", f"algo.kl_cache_dir={caches}")
    files, logps = [], []
    for overrides, dtype in (((), torch.float32), (PRECISIONS["fp32_master"], torch.bfloat16)):
        seen.clear()
        trainer = api.build_trainer(profiled_config(*base, *overrides), tmp_path / str(dtype))
        assert next(trainer.model.base.parameters()).dtype == torch.float32 and seen == {dtype}, seen
        files.append({p.name for p in caches.iterdir()})
        logps.append(trainer.train_dataset.rows[0]["t_logp"])
    assert len(files[0]) == 1 and len(files[1]) == 2  # the autocast run did not reuse the fp32 run's cache
    assert not torch.equal(logps[0], logps[1])  # ...whose numbers are not its own


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_d2l_api_and_eval_in_bf16(tmp_path: Path, precision):
    """`load_d2l` -> `internalize` -> `generate`, and `mode=eval`'s held-out table, on the profile's weights."""
    from posttrain.algos.d2l import api

    cfg = profiled_config(
        "model=tiny_llama",
        "algo=d2l",
        "data=d2l_synth",
        "data.num_eval=4",
        "algo.max_new_tokens=3",
        "algo.eval_batch_size=4",
        *PRECISIONS[precision],
    )
    trained = api.build_model(cfg)
    with torch.no_grad():
        trained.hypernet.scale_B.normal_(0, 1.0)  # a non-zero generated update
    trained.save_hypernet(tmp_path / "ckpt")
    model = api.load_d2l(cfg, tmp_path / "ckpt")
    assert next(model.base.parameters()).dtype == PARAM_DTYPE[precision]
    assert {p.dtype for p in model.hypernet.parameters()} == {torch.float32}
    lora = model.internalize("Bazoru lives in Oslo. Bazoru likes teal.")
    assert all(a.dtype == torch.float32 and bool(a.isfinite().all()) for a in (*lora.A.values(), *lora.B.values()))
    prompt = model.tokenizer("Where does Bazoru live?", return_tensors="pt")
    with torch.no_grad():
        bare = model.base(**prompt, use_cache=False).logits
        model.apply_lora(lora)
        adapted = model.base(**prompt, use_cache=False).logits
        model.reset()
    assert adapted.dtype == PARAM_DTYPE[precision] and (adapted.float() - bare.float()).abs().max() > 1e-2
    assert isinstance(model.generate("Where does Bazoru live?", lora, max_new_tokens=3), str)
    (tmp_path / "eval").mkdir()
    result = api.evaluate(cfg, tmp_path / "eval", tmp_path / "ckpt")["eval"]
    losses = {c: result[c]["answer_loss"] for c in ("no_context", "in_context", "d2l", "d2l_other_doc")}
    assert all(math.isfinite(v) and 0 < v < 20 for v in losses.values()), losses
    assert losses["d2l"] != losses["no_context"]  # the generated LoRA is applied in the table
