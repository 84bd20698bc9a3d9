"""`liger` backend: Liger-Kernel's fused-linear GRPO loss (`LigerFusedLinearGRPOFunction`).

Liger computes the loss *and* its gradients chunk by chunk in the forward (one sequence per chunk, its
default), so the loss math is Liger's own, not `policy_loss_from_logps`. What it cannot do raises
`NotImplementedError` naming the option, instead of silently computing something else:
- `kl_estimator` other than `k3` with `beta != 0` (Liger's KL is k3 only),
- per-token advantages `[B, T]` (Liger takes `[B]`).

Stats: Liger reports the KL mean (only when `beta != 0`) and one clip ratio (token-weighted, also at
sequence level), and no per-token values, so `kl_p95` is NaN and `clip_ratio/low_mean`, `/high_mean`
are not reported. Use another backend when those matter.
"""

from __future__ import annotations

import math

import torch


def liger_grpo_loss(
    hidden,
    lm_head_weight,
    completion_ids,
    completion_mask,
    advantages,
    old_logps,
    ref_logps,
    *,
    beta,
    epsilon_low,
    epsilon_high,
    loss_type,
    kl_estimator,
    importance_sampling_level,
    temperature,
    max_completion_length,
    kl_bias_correction,
    vllm_is_ratio,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Same contract as `posttrain.kernels.grpo_loss` (backend="liger")."""
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction

    if beta != 0.0 and kl_estimator != "k3":
        raise NotImplementedError(
            f"backend='liger' supports kl_estimator='k3' only (got {kl_estimator!r}); use backend='fused' or 'eager'"
        )
    if advantages.dim() != 1:
        raise NotImplementedError(
            "backend='liger' supports advantages of shape [B] only (got per-token "
            f"advantages {tuple(advantages.shape)})"
        )
    B, T, _ = hidden.shape
    mask = completion_mask.to(torch.float32)
    use_ref = beta != 0.0
    loss, metrics = LigerFusedLinearGRPOFunction.apply(
        hidden,
        lm_head_weight,
        completion_ids,
        mask,
        advantages.float(),
        None,  # bias
        ref_logps.float() if (use_ref and ref_logps is not None) else None,
        old_logps.float() if old_logps is not None else None,
        None,
        None,
        None,  # ref_input, ref_weight, ref_bias
        beta,
        epsilon_low,
        epsilon_high,
        loss_type,
        max_completion_length if max_completion_length is not None else T,
        importance_sampling_level,
        1.0,
        1.05,  # sapo temperatures (unused)
        float(temperature),
        False,  # compiled: no torch.compile of the loss math
        use_ref,
        1,  # chunk_size (Liger's default)
        vllm_is_ratio.float() if vllm_is_ratio is not None else None,
        None,  # delta (two-sided clipping: off, as in TRL)
        bool(kl_bias_correction),  # TRL's use_bias_correction_kl
        2.0,
        3.0,
        3.0,
        2.0,  # vespo (unused)
        mask.sum(),  # num_items_in_batch (dapo normalizer)
    )
    metrics = [m.item() for m in metrics]
    nan = math.nan
    stats = {
        "policy_loss": loss.item(),
        "kl_mean": metrics[0] if use_ref else nan,
        "kl_p95": nan,
        "clip_ratio": metrics[-1],
    }
    return loss, stats
