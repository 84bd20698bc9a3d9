"""`liger` backend: Liger-Kernel's fused-linear GRPO loss (`LigerFusedLinearGRPOFunction`).

Liger computes the loss *and* its gradients chunk by chunk in the forward (one sequence per chunk, its
default), so the loss math is Liger's own, not `policy_loss_from_logps`. It implements TRL 1.16's eight loss
types, `delta`, the sapo and vespo parameters, the KL bias correction and the vLLM importance-sampling ratio.
What it cannot do is refused before it runs (`registry.refusal`, NotImplementedError from `grpo_loss`): a KL
estimator other than k3, the off-policy and top-entropy masks, the entropy bonus, sequence-level importance
sampling with cispo/sapo/vespo (Liger raises), and luspo wherever its per-token loss is not one value per
sequence (Liger reduces luspo as an older TRL did). Per-token advantages `[B, T]` raise here (Liger takes `[B]`).

Stats: Liger reports the KL mean (only when `beta != 0`) and one clip ratio (token-weighted, also at
sequence level, and before the `delta` cap: TRL's `clip_ratio/region_mean`, or `cispo_clip_ratio` for cispo),
and no per-token values, so
`kl_p95` is NaN and the other ratio metrics are not reported. Use another backend when those matter.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posttrain.kernels.policy_loss import DeviceStats


def _process_count() -> int:
    """Liger divides `num_items_in_batch` by the torch.distributed world size itself."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def liger_grpo_loss(
    hidden,
    lm_head_weight,
    completion_ids,
    completion_mask,
    advantages,
    old_logps,
    ref_logps,
    *,
    temperature: float,
    **opts: Any,
) -> tuple[torch.Tensor, DeviceStats]:
    """Same contract as `posttrain.kernels.grpo_loss` (backend="liger"); `opts` are all of its options."""
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction

    from posttrain.kernels.registry import LOSSES

    if advantages.dim() != 1:
        raise NotImplementedError(
            "backend='liger' supports advantages of shape [B] only (got per-token "
            f"advantages {tuple(advantages.shape)})"
        )
    B, T, _ = hidden.shape
    mask = completion_mask.to(torch.float32)
    beta, loss_type, is_ratio = opts["beta"], opts["loss_type"], opts["vllm_is_ratio"]
    window = opts["window_tokens"]
    window = mask.sum().clamp(min=1.0) if window is None else torch.as_tensor(window, dtype=torch.float32)
    use_ref = beta != 0.0
    max_len = opts["max_completion_length"]
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
        opts["epsilon_low"],
        opts["epsilon_high"],
        loss_type,
        max_len if max_len is not None else T,
        opts["importance_sampling_level"],
        opts["sapo_temperature_pos"],
        opts["sapo_temperature_neg"],
        float(temperature),
        False,  # compiled: no torch.compile of the loss math
        use_ref,
        1,  # chunk_size (Liger's default)
        is_ratio.float() if is_ratio is not None else None,
        opts["delta"],
        bool(opts["kl_bias_correction"]),  # TRL's use_bias_correction_kl
        opts["vespo_k_pos"],
        opts["vespo_lambda_pos"],
        opts["vespo_k_neg"],
        opts["vespo_lambda_neg"],
        window * _process_count(),  # num_items_in_batch: the window_tokens normaliser
    )
    term = LOSSES[loss_type].term
    policy_loss = loss.detach()
    if LOSSES[loss_type].reduce != "window_tokens":
        loss = loss / opts["accumulation_steps"]
    nan = torch.full((), math.nan, device=loss.device)
    stats = {"policy_loss": policy_loss, "kl_mean": metrics[0].detach() if use_ref else nan, "kl_p95": nan}
    if term in ("clip", "cispo"):
        stats["clip_ratio" if term == "clip" else "cispo_clip_ratio"] = metrics[-1].detach()
    return loss, DeviceStats(stats, torch.float32)
