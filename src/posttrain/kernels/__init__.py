"""Policy-loss kernels: the GRPO loss from hidden states without (or with) materializing `[tokens, V]` logits.

    from posttrain.kernels import grpo_loss, BACKENDS, available
    loss, stats = grpo_loss(hidden, lm_head_weight, completion_ids, completion_mask, advantages,
                            old_logps, ref_logps, backend="fused", beta=0.04, loss_type="dapo")

Contract with the trainer
-------------------------
- `hidden` [B, T, H]: the model's final-norm hidden states at the positions that *predict* the
  completion tokens (already shifted: `last_hidden_state[:, P-1:-1]` for prompt length P), so
  `hidden[b, t] @ lm_head_weight.T` are the logits of `completion_ids[b, t]`.
- `lm_head_weight` [V, H] = `model.lm_head.weight` (tied or not); it gets a gradient when it requires one.
- `completion_mask` [B, T] 0/1 (rows may be empty); `advantages` [B] (or [B, T]).
- `old_logps` [B, T] or None: None means on-policy (ratio 1, TRL's `per_token_logps.detach()`).
- `ref_logps` [B, T] or None: required when `beta != 0`; when given, KL stats are reported for any beta.
- The loss is TRL 1.16 `GRPOTrainer._compute_loss` for one process and one micro-batch: `grpo`
  (per-sequence mean, then batch mean), `bnpo` (token mean), `dr_grpo` (/ (B * max_completion_length),
  default T), `dapo` (/ number of mask tokens in this batch). It is **not** divided by gradient-
  accumulation steps: the trainer scales it (and passes its own normalizer logic for dapo if it
  accumulates). Per-token KL (`k1 = logp - ref`, `k2 = (logp - ref)^2 / 2`, `k3 = exp(ref - logp) -
  (ref - logp) - 1`), multiplied by the differentiable importance weight `coef_1` when `kl_bias_correction`
  (TRL's `use_bias_correction_kl`, on by default as in TRL), is added as `beta * kl` per token, masked like
  the loss. `vllm_is_ratio` (TRL's `importance_sampling_ratio`, [B, T] or [B, 1]) multiplies the policy term
  before the KL is added. Temperature divides the logits. Log-softmax is always fp32 (fp64 for fp64 inputs).
- `stats` (floats): `policy_loss`, `kl_mean` (masked token mean of the KL term as it enters the loss, TRL's
  `kl`), `kl_p95`, `clip_ratio` (TRL's `clip_ratio/region_mean`), `clip_ratio/low_mean`,
  `clip_ratio/high_mean` (liger: see its module).

Backends (`BACKENDS`; `available(name)` says whether one runs here and why not):
- `eager`   materialized fp32 logits: the reference.
- `chunked` TRL's `ChunkedLogProbFunction` (what `GRPOTrainer` itself runs).
- `liger`   Liger's `LigerFusedLinearGRPOFunction` (k3 only; raises NotImplementedError otherwise).
- `fused`   ours (`fused.py`): two GEMMs per tile, d hidden finished in the forward, no recompute.
- `triton`  the same algorithm with the tile fold in Triton (CUDA, or CPU with TRITON_INTERPRET=1).
- `pallas`  the same algorithm as a JAX Pallas kernel (TPU; CPU with interpret=True), JAX optional.
"""

from __future__ import annotations

import importlib.util
import os

from .loss import (
    KL_BIAS_CORRECTION,
    completion_logps,
    grpo_loss,
    kl_per_token,
    lm_head_gathered,
    per_token_kl,
    policy_loss_from_logps,
)

BACKENDS: tuple[str, ...] = ("eager", "chunked", "liger", "fused", "triton", "pallas")


def available(backend: str) -> tuple[bool, str]:
    """(True, "") when `backend` can run in this environment, else (False, reason)."""
    if backend in ("eager", "fused"):
        return True, ""
    if backend == "chunked":
        ok = importlib.util.find_spec("trl") is not None
        return (True, "") if ok else (False, "trl is not installed")
    if backend == "liger":
        ok = importlib.util.find_spec("liger_kernel") is not None
        return (True, "") if ok else (False, "liger-kernel is not installed")
    if backend == "triton":
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        import torch

        if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
            return True, ""
        return False, "triton needs a CUDA device, or TRITON_INTERPRET=1 to run on CPU"
    if backend == "pallas":
        if importlib.util.find_spec("jax") is None:
            return False, "jax is not installed (pip install posttrain[tpu])"
        return True, ""
    return False, f"unknown backend {backend!r}; one of {BACKENDS}"


__all__ = ["BACKENDS", "KL_BIAS_CORRECTION", "available", "grpo_loss", "completion_logps", "policy_loss_from_logps",
           "per_token_kl", "kl_per_token", "lm_head_gathered"]
