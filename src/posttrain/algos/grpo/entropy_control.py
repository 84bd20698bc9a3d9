"""TRL 1.16's entropy bonus controller (`entropy_coef`, `use_adaptive_entropy`) for the kernel path.

TRL's own loss path runs it inside `GRPOTrainer._compute_loss`; the kernel path computes the bonus in
`posttrain.kernels.grpo_loss` and keeps the controller's state in the same trainer attributes TRL does
(`entropy_coef`, `_last_world_entropy`, `_entropy_window_stats`), so TRL's checkpointing of it
(`entropy_ctrl_state.json`) applies unchanged. A transcription of TRL's lines: they are inline in `_compute_loss`.
"""

from __future__ import annotations

from typing import Any

import torch

from posttrain.kernels.policy_loss import DeviceStats


def applied_entropy_coef(trainer: Any) -> float:
    """The coefficient this micro-batch's bonus uses: the one set at the end of the previous optimizer step,
    applied under adaptive control only while the last window's entropy is at or below `entropy_target`."""
    if not trainer._entropy_bonus_enabled:
        return 0.0
    if trainer.use_adaptive_entropy:
        return trainer.entropy_coef if trainer._last_world_entropy <= trainer.args.entropy_target else 0.0
    return trainer.entropy_coef


def update_entropy_control(trainer: Any, mode: str, stats: DeviceStats) -> None:
    """TRL's logging and adaptive update after one micro-batch: `policy_loss` (mean over processes, kept on the
    device), the window's entropy over the bonus's tokens (`entropy_sum`, `entropy_tokens`), and at each optimizer
    step the coefficient moved by `entropy_coef_delta` toward keeping the entropy above `entropy_target` (a host
    read, as in TRL, only then)."""
    if not trainer._entropy_bonus_enabled:
        return
    acc, args = trainer.accelerator, trainer.args
    trainer._metrics[mode]["policy_loss"].append(acc.gather(stats.tensor("policy_loss").float()).nanmean())
    if trainer.use_adaptive_entropy and mode == "train":
        window = torch.stack([stats.tensor("entropy_sum").float(), stats.tensor("entropy_tokens").float()])
        prev = trainer._entropy_window_stats
        trainer._entropy_window_stats = window if prev is None else prev + window
        if acc.sync_gradients:
            totals = acc.reduce(trainer._entropy_window_stats, reduction="sum")
            world_entropy = (totals[0] / totals[1].clamp(min=1.0)).item()
            if world_entropy <= args.entropy_target:
                trainer.entropy_coef = min(trainer.entropy_coef + args.entropy_coef_delta, args.entropy_coef_max)
            else:
                trainer.entropy_coef = max(trainer.entropy_coef - args.entropy_coef_delta, args.entropy_coef_min)
            trainer._last_world_entropy = world_entropy
            trainer._entropy_window_stats = None
    if mode == "train" and acc.sync_gradients:
        trainer._metrics[mode]["entropy_coef"].append(trainer.entropy_coef)
