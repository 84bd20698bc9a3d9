"""The gap between the rollout engine that samples and the policy that learns, measured every step and optionally
corrected (`algo.sampler_correction`).

A merged rollout copy (`bf16_copy`, `static`) samples from weights rounded to its dtype, with other kernels and a
lag of one sync; its recorded log-prob of each sampled token (`sampling_per_token_logps`, `posttrain.rollout`) is
compared with the learner's log-prob of the same token at sampling time (TRL's `old_per_token_logps` when it has
them, else the policy pass of the loss, which on-policy is the same weights):

    sampling/sampling_logp_difference/{mean,max}   |learner - sampler| over the completion tokens (TRL's names)
    sampling/importance_sampling_ratio/{mean,max}  exp(learner - sampler) per token, before any correction
    sampling/sampler_kl                            mean(sampler - learner): the k1 estimate of KL(sampler || learner)

With `algo.sampler_correction` the trainer does for the copy what TRL does for vLLM: an extra no-grad pass of the
policy gives `old_per_token_logps`, and `sampling_importance_ratio` (TRL's
`vllm_importance_sampling_mode`, `_clip_min`, `_clip_max`) gives `importance_sampling_ratio`, which TRL's loss
multiplies into the policy term through its own vLLM branch (`trl_applies_ratio`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from posttrain.kernels.registry import SAMPLING_IS_MODES


def sampling_importance_ratio(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> torch.Tensor:
    """TRL 1.16's vLLM importance-sampling correction (`vllm_importance_sampling_*`), for any sampler.

    The ratio pi_old / pi_sampler of the learner's log-probs to the ones the completions were sampled with: per
    token [B, T] (`token_*` modes) or one per sequence [B, 1] (`sequence_*`: exp of the summed log-ratio), then
    clipped to [clip_min, clip_max] (`*_truncate`) or set to 0 outside it (`*_mask`); a bound left None is open.
    A sampler log-prob that is NaN (not reported) counts as agreeing. The loss multiplies its policy term by it.
    """
    if mode not in SAMPLING_IS_MODES:
        raise ValueError(f"mode must be one of {SAMPLING_IS_MODES}, got {mode!r}")
    diff = torch.nan_to_num((old_logps - sampling_logps) * completion_mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        if clip_min is None and clip_max is None:
            raise ValueError(f"mode={mode} needs clip_min or clip_max")
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def record_mismatch(trainer: Any, mode: str, learner: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> None:
    """Append this micro-batch's mismatch metrics (every process's tokens) to `trainer._metrics[mode]`, as device
    tensors (`device_metrics`)."""
    valid = mask.bool() & ~torch.isnan(sampler)
    diff = (learner.float() - sampler.float()).masked_fill(~valid, 0.0)
    count = valid.sum().float()
    sums = torch.stack([diff.abs().sum(), diff.exp().masked_fill(~valid, 0.0).sum(), (-diff).sum(), count])
    totals = trainer.accelerator.reduce(sums, reduction="sum")
    n = totals[3].clamp(min=1.0)
    highs = torch.stack([diff.abs().max(), diff.exp().masked_fill(~valid, 0.0).max()])
    highs = trainer.accelerator.reduce(highs, reduction="max") if trainer.accelerator.num_processes > 1 else highs
    metrics = trainer._metrics[mode]
    metrics["sampling/sampling_logp_difference/mean"].append(totals[0] / n)
    metrics["sampling/sampling_logp_difference/max"].append(highs[0])
    metrics["sampling/importance_sampling_ratio/mean"].append(totals[1] / n)
    metrics["sampling/importance_sampling_ratio/max"].append(highs[1])
    metrics["sampling/sampler_kl"].append(totals[2] / n)


@torch.no_grad()
def add_correction(trainer: Any, scored: dict[str, Any]) -> None:
    """`old_per_token_logps` (an extra policy pass, unless TRL made one) and the clipped or masked
    `importance_sampling_ratio` of a scored batch, in place."""
    if "sampling_per_token_logps" not in scored:
        return
    mask = scored["completion_mask"]
    old = scored.get("old_per_token_logps")
    if old is None:
        ids = torch.cat([scored["prompt_ids"], scored["completion_ids"]], dim=1)
        attention = torch.cat([scored["prompt_mask"], mask], dim=1)
        old, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, mask.size(1), batch_size=trainer.args.per_device_train_batch_size
        )
        scored["old_per_token_logps"] = old
    args = trainer.args
    scored["importance_sampling_ratio"] = sampling_importance_ratio(
        old,
        scored["sampling_per_token_logps"],
        mask,
        args.vllm_importance_sampling_mode,
        args.vllm_importance_sampling_clip_min,
        args.vllm_importance_sampling_clip_max,
    )


@contextlib.contextmanager
def trl_applies_ratio(trainer: Any, inputs: dict[str, Any]) -> Iterator[None]:
    """Within TRL's `_compute_loss`, multiply `inputs["importance_sampling_ratio"]` into the policy term as TRL does
    for vLLM: its only gate there is `self.use_vllm and self.vllm_importance_sampling_correction`."""
    if trainer.use_vllm or "importance_sampling_ratio" not in inputs:
        yield
        return
    saved = trainer.use_vllm, trainer.vllm_importance_sampling_correction
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    try:
        yield
    finally:
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = saved
