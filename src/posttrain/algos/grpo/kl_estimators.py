"""The per-token KL term of GRPO's loss, and the estimators TRL's loss lacks (`algo.kl.estimator=k1|k2`).

TRL 1.16's `_compute_loss` adds `beta * k3` per token (times the importance weight with `use_bias_correction_kl`)
before it reduces the per-token losses. For k1 and k2 the trainer runs TRL's loss with beta 0 and adds
`beta * reduce(kl_term)` itself (`estimator_loss`): the reduction is linear, so this equals adding the term per
token where TRL adds k3. With k3 nothing here enters the loss; `kl_term` only gives the `kl_p95` metric.

    k1 = logp - ref      k2 = (logp - ref)^2 / 2      k3 = exp(ref - logp) - (ref - logp) - 1
(http://joschu.net/blog/kl-approx.html). On-policy, k2's gradient is the reverse KL's; k1's has mean zero.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.kernels.registry import KL_ESTIMATORS, LOSSES


def per_token_kl(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens."""
    if estimator == "k1":
        return logps - ref_logps
    if estimator == "k2":
        return 0.5 * (logps - ref_logps) ** 2
    if estimator == "k3":
        d = ref_logps - logps
        return torch.exp(d) - d - 1
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def kl_term(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    mask: torch.Tensor,
    old_logps: torch.Tensor | None,
    *,
    estimator: str,
    bias_correction: bool,
    importance_sampling_level: str,
) -> torch.Tensor:
    """The per-token KL [B, T] as it enters the loss (before beta): the estimator's value, times TRL's importance
    weight `coef_1` (exp(logp - old) per token, or of its masked sequence mean) with `bias_correction`."""
    m = mask.to(logps.dtype)
    ref = ref_logps.to(logps.dtype).masked_fill(m == 0, 0.0)
    kl = per_token_kl(logps, ref, estimator)
    if bias_correction:
        old = logps.detach() if old_logps is None else old_logps.to(logps.dtype).masked_fill(m == 0, 0.0)
        log_ratio = logps - old
        if importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        kl = kl * torch.exp(log_ratio)
    return kl


def reduce_like_trl(trainer: Any, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
    """`per_token` [B, T] reduced to the scalar TRL's `_compute_loss` makes of its per-token losses for the trainer's
    loss type, accumulation scaling included (`LossType.reduce` names the normaliser)."""
    how = LOSSES[trainer.loss_type].reduce
    train = trainer.model.training
    accum = trainer.current_gradient_accumulation_steps if train else 1.0
    m = mask.to(per_token.dtype)
    masked = per_token * m
    if how == "sequence_mean":
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / accum
    if how == "batch_tokens":
        return masked.sum() / m.sum().clamp(min=1.0) / accum
    if how == "max_length":
        return masked.sum() / (per_token.size(0) * trainer.max_completion_length) / accum
    if how == "sequence_sum":
        return masked.sum(-1).mean() / accum
    window = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes  # window_tokens
    if train:
        window = window * accum / trainer.args.steps_per_generation
    return masked.sum() / window
