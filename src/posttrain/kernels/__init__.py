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
- The loss is TRL 1.16 `GRPOTrainer._compute_loss` for one micro-batch, for each of its eight loss types
  (`registry.LOSSES`: how the ratio enters a token's loss and how the masked losses are reduced) and its knobs
  (`delta`, the sapo/vespo parameters, the off-policy and top-entropy masks, the entropy bonus). Accumulation:
  `window_tokens` is the normaliser of dapo/cispo/vespo (TRL's `num_items_in_batch / processes * accumulation /
  steps_per_generation`; default: this batch's tokens) and the other types and the entropy bonus are divided by
  `accumulation_steps` (default 1). Per-token KL (`k1 = logp - ref`, `k2 = (logp - ref)^2 / 2`, `k3 = exp(ref -
  logp) - (ref - logp) - 1`), multiplied by the differentiable importance weight `coef_1` when `kl_bias_correction`
  (TRL's `use_bias_correction_kl`, on by default as in TRL), is added as `beta * kl` per token, masked like
  the loss. `vllm_is_ratio` (TRL's `importance_sampling_ratio`, [B, T] or [B, 1]; `sampling_importance_ratio`
  computes it) multiplies the policy term before the KL is added (vespo folds it into its weight). Temperature
  divides the logits. Log-softmax is always fp32 (fp64 for fp64 inputs).
- `stats` (floats): `policy_loss`, `kl_mean` (masked token mean of the KL term as it enters the loss, TRL's
  `kl`), `kl_p95`, and the loss type's ratio metrics: `clip_ratio` (TRL's `clip_ratio/region_mean`),
  `clip_ratio/low_mean`, `clip_ratio/high_mean`, or `cispo_clip_ratio`, or `vespo/phi_seq_mean` (liger: see its
  module); with the entropy, `entropy_sum` and `entropy_tokens` over the tokens the bonus acts on.

Backends: the table in `posttrain.kernels.registry` (`BACKENDS[name].summary`; `available(name)` says whether one
runs here and why not). Adding one: a module with the function, one `Backend(...)` row there.
"""

from __future__ import annotations

from typing import Any

from posttrain.kernels.registry import BACKENDS, CHOICES, IS_LEVELS, KL_ESTIMATORS, LOSS_TYPES, available

_LOSS = {  # name -> the module that defines it
    "KL_BIAS_CORRECTION": "policy_loss",
    "completion_logps": "loss",
    "grpo_loss": "loss",
    "kl_per_token": "policy_loss",
    "lm_head_gathered": "loss",
    "per_token_kl": "policy_loss",
    "policy_loss_from_logps": "policy_loss",
    "sampling_importance_ratio": "policy_loss",
}
__all__ = ["BACKENDS", "CHOICES", "IS_LEVELS", "KL_ESTIMATORS", "LOSS_TYPES", "available", *_LOSS]


def __getattr__(name: str) -> Any:  # the loss functions import torch: only when asked for (config stays light)
    if name in _LOSS:
        import importlib

        return getattr(importlib.import_module(f"posttrain.kernels.{_LOSS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
