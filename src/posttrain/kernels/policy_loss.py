"""The GRPO loss on per-token log-probabilities: TRL 1.16 `GRPOTrainer._compute_loss` on the small `[B, T]` tensors.

`policy_loss_from_logps` is a line-by-line transcription of it (every loss type and knob), shared by every backend
in `posttrain.kernels.loss`, so backends differ only in how they get the log-probabilities; beside it the pieces
TRL's loss is made of (KL estimators, importance weights, the sampler correction, the entropy mask) and its metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from posttrain.kernels.registry import (
    IS_LEVELS,
    KL_BIAS_CORRECTION,
    KL_ESTIMATORS,
    LOSS_TYPES,
    LOSSES,
    SAMPLING_IS_MODES,
)


def per_token_kl(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens (http://joschu.net/blog/kl-approx.html).

    k1 = logp - ref; k2 = (logp - ref)^2 / 2; k3 = exp(ref - logp) - (ref - logp) - 1 (TRL's estimator).
    """
    if estimator == "k1":
        return logps - ref_logps
    if estimator == "k2":
        return 0.5 * (logps - ref_logps) ** 2
    if estimator == "k3":
        d = ref_logps - logps
        return torch.exp(d) - d - 1
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def importance_weights(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, importance_sampling_level: str
) -> torch.Tensor:
    """TRL's `coef_1`: exp(logp - old) per token [B, T], or exp of its masked sequence mean [B, 1] (GSPO)."""
    log_ratio = logps - old_logps
    if importance_sampling_level == "token":
        return torch.exp(log_ratio)
    return torch.exp(((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1))


def kl_per_token(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    old_logps: torch.Tensor | None = None,
    *,
    kl_estimator: str = "k3",
    kl_bias_correction: bool = KL_BIAS_CORRECTION,
    importance_sampling_level: str = "token",
) -> torch.Tensor:
    """The per-token KL term [B, T] exactly as it enters the loss (times beta): the estimator's value, multiplied by
    the importance weight when `kl_bias_correction` (TRL's `per_token_kl * coef_1`). This is what `kl` logs."""
    mask = completion_mask.to(logps.dtype)
    ref = ref_logps.to(logps.dtype).masked_fill(mask == 0, 0.0)
    kl = per_token_kl(logps, ref, kl_estimator)
    if kl_bias_correction:
        old = logps.detach() if old_logps is None else old_logps.to(logps.dtype).masked_fill(mask == 0, 0.0)
        kl = kl * importance_weights(logps, old, mask, importance_sampling_level)
    return kl


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


def high_entropy_mask(entropy: torch.Tensor, completion_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """TRL's `GRPOTrainer.get_high_entropy_mask` for one process: the unmasked tokens whose entropy is at least the
    `threshold` quantile of this batch's unmasked entropies (bool [B, T]). The trainer passes TRL's own method
    instead, which takes the quantile over every process's tokens."""
    local = entropy[completion_mask.bool()].float()
    if local.numel() == 0:
        return torch.zeros_like(entropy, dtype=torch.bool)
    cut = torch.quantile(local, threshold)
    return ((entropy * completion_mask.float()) >= cut) & completion_mask.bool()


def _check_options(
    loss_type: str,
    kl_estimator: str,
    importance_sampling_level: str,
    beta: float,
    ref_logps: torch.Tensor | None,
    temperature: float,
) -> None:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if importance_sampling_level not in IS_LEVELS:
        raise ValueError(f"importance_sampling_level must be one of {IS_LEVELS}, got {importance_sampling_level!r}")
    if beta != 0.0 and ref_logps is None:
        raise ValueError("beta != 0 needs ref_logps (the reference model's per-token log-probs)")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def policy_loss_from_logps(
    logps: torch.Tensor,
    completion_mask: torch.Tensor,
    advantages: torch.Tensor,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    *,
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_type: str = "grpo",
    kl_estimator: str = "k3",
    importance_sampling_level: str = "token",
    max_completion_length: int | None = None,
    kl_bias_correction: bool = KL_BIAS_CORRECTION,
    vllm_is_ratio: torch.Tensor | None = None,
    delta: float | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    off_policy_mask_threshold: float | None = None,
    sampling_logps: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    top_entropy_quantile: float = 1.0,
    entropy_coef: float = 0.0,
    entropy_mask_fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None,
    window_tokens: torch.Tensor | float | None = None,
    accumulation_steps: float = 1.0,
) -> tuple[torch.Tensor, Mapping[str, float]]:
    """TRL 1.16 `GRPOTrainer._compute_loss` from per-token log-probs `logps` [B, T], line by line.

    The knobs are `GRPOConfig`'s, with its names and defaults. Beyond them: `vllm_is_ratio` ([B, T] or [B, 1],
    TRL's `inputs["importance_sampling_ratio"]`, `sampling_importance_ratio`), `sampling_logps` (TRL's
    `sampling_per_token_logps`, for the off-policy mask; None: `old_logps`), `entropy` [B, T] (the policy's per-token
    entropy: needed by `top_entropy_quantile < 1` and, with its gradient, by `entropy_coef != 0`, the coefficient
    this step applies), `entropy_mask_fn` (TRL's `get_high_entropy_mask`; None: this process's quantile),
    `window_tokens` (the normaliser of the `window_tokens` loss types, TRL's `num_items_in_batch / processes *
    accumulation / steps_per_generation`; None: this batch's tokens) and `accumulation_steps` (what the other loss
    types and the entropy bonus are divided by). The defaults are one process, no accumulation.
    """
    kind = LOSSES[loss_type]
    dtype = logps.dtype
    mask = completion_mask.to(dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    advantages = advantages.to(dtype)
    # logps are 0 at masked positions (as in TRL); zero old/ref there too, so stale or garbage values at
    # masked positions (e.g. -1e9 padding) cannot turn into inf * 0 = NaN. Unmasked values are untouched.
    old = logps.detach() if old_logps is None else old_logps.to(dtype).masked_fill(mask == 0, 0.0)
    if ref_logps is not None:
        ref_logps = ref_logps.to(dtype).masked_fill(mask == 0, 0.0)
    if (top_entropy_quantile < 1.0 or entropy_coef != 0.0) and entropy is None:
        raise ValueError("top_entropy_quantile < 1 and entropy_coef != 0 need the per-token entropy")

    entropy_mask = None
    if top_entropy_quantile < 1.0:
        assert entropy is not None
        entropy_mask = (entropy_mask_fn or high_entropy_mask)(
            entropy.detach(), completion_mask, 1 - top_entropy_quantile
        )
    off_policy_mask = None
    if off_policy_mask_threshold is not None:
        sampled = old if sampling_logps is None else sampling_logps.to(dtype)
        off_policy_mask = _trl().get_off_policy_mask(advantages, logps, sampled, mask, off_policy_mask_threshold)

    log_ratio = logps - old
    coef_1 = importance_weights(logps, old, mask, importance_sampling_level)
    kl = None
    if ref_logps is not None:
        kl = per_token_kl(logps, ref_logps, kl_estimator)
        if kl_bias_correction:
            kl = kl * coef_1

    phi = None
    if kind.term == "cispo":
        per_token_loss = -torch.clamp(coef_1, max=epsilon_high).detach() * advantages * logps
    elif kind.term == "clip":
        coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
        if delta is not None:  # two-sided clipping (INTELLECT-2)
            coef_1 = torch.clamp(coef_1, max=delta)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    elif kind.term == "sapo":
        temperatures = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
        per_token_loss = -torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures * advantages
    else:  # vespo
        vespo = dict(k_pos=vespo_k_pos, lambda_pos=vespo_lambda_pos, k_neg=vespo_k_neg, lambda_neg=vespo_lambda_neg)
        phi = _trl().get_gamma_weights(advantages, log_ratio, mask, vllm_is_ratio, **vespo)
        per_token_loss = -phi * advantages * logps

    if off_policy_mask is not None:
        per_token_loss = per_token_loss * off_policy_mask
    if entropy_mask is not None:
        per_token_loss = per_token_loss * entropy_mask
    if vllm_is_ratio is not None and kind.term != "vespo":  # VESPO folds it into its weight
        per_token_loss = per_token_loss * vllm_is_ratio.to(dtype)
    if kl is not None and beta != 0.0:
        per_token_loss = per_token_loss + beta * kl

    loss = _reduce(kind.reduce, per_token_loss, mask, max_completion_length, window_tokens)
    policy_loss = loss.detach()
    if kind.reduce != "window_tokens":  # the window normaliser already counts the accumulated micro-batches
        loss = loss / accumulation_steps
    if entropy_coef != 0.0:  # TRL's bonus: the token mean of the entropy, whatever the loss type's normaliser
        assert entropy is not None
        bonus_mask = mask if entropy_mask is None else mask * entropy_mask
        loss = loss - entropy_coef * (entropy * bonus_mask).sum() / bonus_mask.sum().clamp(min=1.0) / accumulation_steps

    with torch.no_grad():
        metrics = _stats(policy_loss, kl, coef_1, phi, advantages, mask, kind.term, epsilon_low, epsilon_high)
        if entropy is not None:  # for adaptive entropy control: the entropy over the tokens the bonus acts on
            bonus_mask = mask if entropy_mask is None else mask * entropy_mask
            metrics["entropy_sum"] = (entropy.detach() * bonus_mask).sum()
            metrics["entropy_tokens"] = bonus_mask.sum()
    return loss, DeviceStats(metrics, mask.dtype)


class DeviceStats(Mapping[str, float]):
    """The loss metrics as floats, copied from the device in one transfer on first read. Reading a device value
    waits for the forward to finish; a caller that reads them after `backward()` (or never: a benchmark) has
    launched the backward by then, so the host keeps queueing work while the GPU computes."""

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
        self._tensors, self._dtype = tensors, dtype
        self._values: dict[str, float] | None = None

    def _resolved(self) -> dict[str, float]:
        if self._values is None:
            values = torch.stack([t.to(self._dtype) for t in self._tensors.values()]).tolist()
            self._values = dict(zip(self._tensors, values))
        return self._values

    def __getitem__(self, key: str) -> float:
        return self._resolved()[key]

    def tensor(self, key: str) -> torch.Tensor:
        """One metric as the 0-dim device tensor it was computed as (no transfer)."""
        return self._tensors[key]

    def __contains__(self, key: object) -> bool:  # Mapping's would read the values
        return key in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        return f"DeviceStats({self._resolved()!r})"


def _trl() -> Any:
    """TRL's `GRPOTrainer`, for its static loss helpers (imported when a loss option needs one)."""
    from trl import GRPOTrainer

    return GRPOTrainer


def _reduce(
    how: str,
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    max_completion_length: int | None,
    window_tokens: torch.Tensor | float | None,
) -> torch.Tensor:
    """The masked per-token losses to one number, as `LossType.reduce` says."""
    masked = per_token_loss * mask
    if how == "sequence_mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if how == "batch_tokens":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if how == "max_length":
        T = max_completion_length if max_completion_length is not None else mask.shape[1]
        return masked.sum() / (per_token_loss.size(0) * T)
    if how == "window_tokens":
        return masked.sum() / (mask.sum().clamp(min=1.0) if window_tokens is None else window_tokens)
    return masked.sum(-1).mean()  # sequence_sum


def _global_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # TRL's `global_masked_mean`: one value per sequence at sequence level (empty rows count), else per token
    if x.shape[1] == 1:
        return x.sum() / max(x.shape[0], 1)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def _stats(policy_loss, kl, coef_1, phi, advantages, mask, term, epsilon_low, epsilon_high) -> dict[str, torch.Tensor]:
    """TRL's loss metrics of this batch: the KL term's mean (and p95), and the loss type's own ratio metrics."""
    nan = torch.tensor(math.nan, dtype=mask.dtype, device=mask.device)
    if kl is not None:
        kl_mean = (kl * mask).sum() / mask.sum().clamp(min=1.0)
        # over the unmasked tokens without boolean indexing (a host sync): NaN elsewhere; all NaN gives NaN
        kl_p95 = torch.nanquantile(torch.where(mask > 0, kl.float(), math.nan).flatten(), 0.95).to(mask.dtype)
    else:
        kl_mean = kl_p95 = nan
    metrics = {"policy_loss": policy_loss, "kl_mean": kl_mean, "kl_p95": kl_p95}
    if term == "clip":
        low = ((coef_1 < 1 - epsilon_low) & (advantages < 0)).to(mask.dtype)
        high = ((coef_1 > 1 + epsilon_high) & (advantages > 0)).to(mask.dtype)
        metrics["clip_ratio"] = _global_masked_mean(torch.maximum(low, high), mask)
        metrics["clip_ratio/low_mean"] = _global_masked_mean(low, mask)
        metrics["clip_ratio/high_mean"] = _global_masked_mean(high, mask)
    elif term == "cispo":
        metrics["cispo_clip_ratio"] = _global_masked_mean(
            ((coef_1 > epsilon_high) & (advantages > 0)).to(mask.dtype), mask
        )
    elif term == "vespo":
        metrics["vespo/phi_seq_mean"] = _global_masked_mean(phi.to(mask.dtype), mask)
    return metrics
