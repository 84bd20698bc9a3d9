"""Rollout engines: where GRPO samples its completions, one table of backends behind one call.

`algo.generation.backend` picks the row:

    hf             TRL's own transformers `generate` on the policy (dynamic cache; TRL turns compilation off)
    bf16_copy      a merged bf16 copy of the policy (LoRA folded in, linears packed for oneDNN on CPU), dynamic cache
    static         the merged copy with a static KV cache and a compiled decode step (CUDA graphs on CUDA)
    static_policy  the policy itself (LoRA unmerged: nothing to sync, no drift) with the static KV cache and the
                   compiled decode step: for models whose second copy does not fit (GPT-OSS-20B, native MXFP4)
    vllm           TRL's vLLM integration (colocate or server, `algo.trl.vllm_mode`; the `gpu` extra)

`hf` and `vllm` run inside TRL (`GRPOTrainer._generate_single_turn`); the other rows build a `RolloutEngine`
(`posttrain.rollout.engine`), the copy-based ones over a `RolloutCopy` (`posttrain.rollout.merged_copy`) that the
trainer re-syncs after every optimizer step (timed: `rollout/sync_seconds`). No torch import here: config
validation reads `BACKENDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import GenerationConfig

    from posttrain.rollout.engine import RolloutEngine


@dataclass(frozen=True)
class Backend:
    name: str
    summary: str
    merged_copy: bool  # samples from a RolloutCopy (re-synced each optimizer step)
    devices: tuple[str, ...]  # hw.device values it runs on
    engine: bool = True  # posttrain's RolloutEngine generates (its samplers, static cache); False: TRL does


ALL = ("cpu", "cuda", "xla")

_TABLE = (
    Backend("hf", "TRL's transformers generate on the policy (dynamic KV cache, no compilation)", False, ALL, False),
    Backend("bf16_copy", "merged bf16 copy, oneDNN-packed linears, dynamic KV cache", True, ("cpu",)),
    Backend(
        "static", "merged copy, static KV cache, compiled decode step (CUDA graphs on CUDA)", True, ("cpu", "cuda")
    ),
    Backend(
        "static_policy",
        "the policy itself (LoRA unmerged), static KV cache, compiled decode step (CUDA graphs on CUDA)",
        False,
        ("cpu", "cuda"),
    ),
    Backend("vllm", "TRL's vLLM engine, colocate or server mode (the gpu extra)", False, ("cpu", "cuda"), False),
)
BACKENDS: dict[str, Backend] = {b.name: b for b in _TABLE}
STATIC_CACHE = ("static", "static_policy")  # the engines that decode into a StaticCache
# how a copy-based engine draws each token (`algo.generation.sampler`): transformers' torch.multinomial, or one uniform
# per row inside a greedy generate (`posttrain.rollout.inverse_cdf`)
SAMPLERS = ("multinomial", "inverse_cdf")


def copy_dtype(backend: str, precision: str) -> str:
    """The rollout copy's dtype: bf16 for `bf16_copy`; for `static` the precision training runs in."""
    if backend == "bf16_copy":
        return "bfloat16"
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")


def build_engine(
    cfg: Any,
    policy: Any,
    generation_config: GenerationConfig,
    *,
    pad_token_id: int,
    eos_token_ids: list[int],
    pad_to_multiple_of: Any = None,
) -> RolloutEngine | None:
    """The engine for `cfg.algo.generation.backend` over `policy` (None for `hf` and `vllm`: TRL generates)."""
    import torch

    from posttrain.rollout.engine import RolloutEngine, static_generation_config
    from posttrain.rollout.merged_copy import RolloutCopy

    gen = cfg.algo.generation
    backend = BACKENDS[gen.backend]
    if not backend.engine:
        return None
    rollout_copy = None
    if backend.merged_copy:
        # sdpa decodes Llama fastest on the copy whatever training uses (experiments/grpo_step); GPT-OSS keeps eager
        attn = "sdpa" if cfg.model.family == "llama" else None
        dtype = getattr(torch, copy_dtype(gen.backend, cfg.hw.precision))
        rollout_copy = RolloutCopy(policy, attn_implementation=attn, dtype=dtype)
    config, cache_len = generation_config, None
    if gen.backend in STATIC_CACHE:
        device = next(policy.parameters()).device.type
        compile_decode = gen.compile if gen.compile is not None else device == "cuda"
        config = static_generation_config(generation_config, compile_decode, device)
        longest_prompt = cfg.algo.max_prompt_length
        if pad_to_multiple_of:
            longest_prompt = -(-longest_prompt // pad_to_multiple_of) * pad_to_multiple_of
        cache_len = longest_prompt + cfg.algo.trl.max_completion_length
    return RolloutEngine(
        policy if rollout_copy is None else None,
        config,
        pad_token_id=pad_token_id,
        eos_token_ids=eos_token_ids,
        pad_to_multiple_of=pad_to_multiple_of,
        rollout_copy=rollout_copy,
        static_cache_len=cache_len,
        share_prompts=cfg.algo.share_prompts,
        sampler=gen.sampler,
        name=gen.backend,
    )
