"""`grpo_loss`: the GRPO policy loss from hidden states, dispatched to a kernel backend.

Every backend except `liger` only computes the per-token log-probabilities of the completion tokens
(`logp = log_softmax(hidden @ W.T / temperature)[target]`, in fp32); the loss itself is
`policy_loss_from_logps`, a line-by-line transcription of TRL 1.16 `GRPOTrainer._compute_loss` on the
small `[B, T]` tensors, shared by all of them. So the backends can only differ in how they get the
log-probabilities and their gradients, never in the loss semantics.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from posttrain.kernels.registry import (
    BACKENDS,
    IS_LEVELS,
    KL_BIAS_CORRECTION,
    KL_ESTIMATORS,
    LOSS_TYPES,
    LOSSES,
    SAMPLING_IS_MODES,
    refusal,
)


def lm_head_gathered(*params: torch.Tensor | None) -> AbstractContextManager:
    """TRL's `maybe_gather_lm_head_ctx`: gathers ZeRO-3-partitioned LM-head parameters for a direct read.

    A null context unless DeepSpeed is loaded (ZeRO-3 cannot be active otherwise), so the kernels never import TRL
    or DeepSpeed on their own.
    """
    if "deepspeed" not in sys.modules:
        return nullcontext()
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    return maybe_gather_lm_head_ctx(*params)  # type: ignore[arg-type]  # the LM head's parameters


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
) -> tuple[torch.Tensor, dict[str, float]]:
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
        stats = _stats(policy_loss, kl, coef_1, phi, advantages, mask, kind.term, epsilon_low, epsilon_high)
        if entropy is not None:  # for adaptive entropy control: the entropy over the tokens the bonus acts on
            bonus_mask = mask if entropy_mask is None else mask * entropy_mask
            stats["entropy_sum"], stats["entropy_tokens"] = torch.stack(
                [(entropy.detach() * bonus_mask).sum(), bonus_mask.sum()]
            ).tolist()
    return loss, stats


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


def _stats(policy_loss, kl, coef_1, phi, advantages, mask, term, epsilon_low, epsilon_high) -> dict[str, float]:
    """TRL's loss metrics of this batch: the KL term's mean (and p95), and the loss type's own ratio metrics."""
    nan = torch.tensor(math.nan, dtype=mask.dtype, device=mask.device)
    if kl is not None:
        kl_mean = (kl * mask).sum() / mask.sum().clamp(min=1.0)
        kl_tokens = kl[mask > 0]
        kl_p95 = torch.quantile(kl_tokens.float(), 0.95).to(mask.dtype) if kl_tokens.numel() else nan
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
    values = torch.stack([v.to(mask.dtype) for v in metrics.values()]).tolist()
    return dict(zip(metrics, values))


def _backend_fn(backend: str, kind: str) -> Callable:
    entry = BACKENDS.get(backend)
    if entry is None or entry.kind != kind:
        names = tuple(name for name, b in BACKENDS.items() if b.kind == kind)
        raise ValueError(f"backend must be one of {names}, got {backend!r}")
    return entry.load()


def completion_logps(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    backend: str = "fused",
    temperature: float = 1.0,
) -> torch.Tensor:
    """Per-token log-probs [B, T] (fp32, fp64 for fp64 inputs) of `completion_ids`; 0 where the mask is 0.

    Only the unmasked positions are projected (padding costs nothing); like TRL, masked positions are 0.
    """
    fn = _backend_fn(backend, "logps")
    return _completion_outputs(fn, 1, hidden, lm_head_weight, completion_ids, completion_mask, temperature)[0]


def completion_logps_entropy(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    backend: str = "fused",
    temperature: float = 1.0,
    grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`completion_logps` and the per-token entropy [B, T] (0 where masked) from the same pass, for the backends
    that have one (`Backend.entropy_function`); None for the others. Detached unless `grad` (then the backend's
    entropy must carry a gradient: `Backend.entropy_grad`)."""
    _backend_fn(backend, "logps")
    fn = BACKENDS[backend].load_with_entropy()
    if fn is None:
        return completion_logps(
            hidden, lm_head_weight, completion_ids, completion_mask, backend=backend, temperature=temperature
        ), None
    if grad and not BACKENDS[backend].entropy_grad:
        raise NotImplementedError(f"backend={backend!r} computes no entropy gradient")
    logps, entropy = _completion_outputs(fn, 2, hidden, lm_head_weight, completion_ids, completion_mask, temperature)
    return logps, entropy if grad else entropy.detach()


def _completion_outputs(
    fn: Callable,
    n_out: int,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, ...]:
    """`fn`'s `n_out` per-token outputs ([N] each, log-probs first) on the unmasked positions, as [B, T] (0 where
    masked)."""
    B, T, H = hidden.shape
    flat_h = hidden.reshape(B * T, H)
    flat_y = ids.reshape(B * T)
    keep = mask.reshape(B * T) != 0
    n_keep = int(keep.sum())

    def as_tuple(out) -> tuple[torch.Tensor, ...]:
        return tuple(out) if n_out > 1 else (out,)

    if n_keep == B * T:
        return tuple(o.view(B, T) for o in as_tuple(fn(flat_h, weight, flat_y, temperature)))
    out_dtype = torch.promote_types(hidden.dtype, torch.float32)
    if n_keep == 0:  # keep the graph connected: a differentiable zero
        zero = (hidden.sum(-1) * 0).to(out_dtype) + (weight.sum() * 0).to(out_dtype)
        return (zero, *(torch.zeros(B, T, dtype=out_dtype, device=hidden.device) for _ in range(n_out - 1)))
    idx = keep.nonzero().squeeze(1)
    outs = as_tuple(fn(flat_h.index_select(0, idx), weight, flat_y.index_select(0, idx), temperature))
    return tuple(torch.zeros(B * T, dtype=o.dtype, device=o.device).index_put((idx,), o).view(B, T) for o in outs)


def grpo_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    advantages: torch.Tensor,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    *,
    backend: str = "fused",
    temperature: float = 1.0,
    return_logps: bool = False,
    return_entropy: bool = False,
    **options: Any,
) -> tuple:
    """GRPO policy loss of completions, from final-norm hidden states and the LM head weight.

    `options` are `policy_loss_from_logps`'s keywords: TRL 1.16 `GRPOConfig`'s loss knobs with its names and
    defaults (`loss_type`, `beta`, `epsilon_low`/`epsilon_high`, `delta`, `importance_sampling_level`, the sapo and
    vespo parameters, `off_policy_mask_threshold`, `top_entropy_quantile`, `entropy_coef`, ...; see the package
    docstring for the contract). `kl_bias_correction` is TRL's `use_bias_correction_kl`, `vllm_is_ratio` its
    `inputs["importance_sampling_ratio"]`. What a backend cannot compute raises NotImplementedError
    (`registry.refusal`). The per-token entropy, where an option needs it, comes from the backend's own pass.
    Returns `(loss, stats)`: a scalar loss and floats (`policy_loss`, `kl_mean`, `kl_p95` (NaN without `ref_logps`),
    the loss type's ratio metrics: `clip_ratio`, `clip_ratio/low_mean`, `clip_ratio/high_mean` | `cispo_clip_ratio`
    | `vespo/phi_seq_mean`). With `return_logps`, also the detached per-token log-probs [B, T] (for metrics over
    several micro-batches or processes; `liger`, which never forms them, gets them from `fused`). With
    `return_entropy`, last the detached per-token entropy [B, T] of the policy's softmax, from the same pass where
    the backend has one, else None.
    """
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"grpo_loss got unknown options {sorted(unknown)}")
    opts = {**_OPTIONS, **options}
    loss_type, beta = opts["loss_type"], opts["beta"]
    _check_options(loss_type, opts["kl_estimator"], opts["importance_sampling_level"], beta, ref_logps, temperature)
    if hidden.dim() != 3 or lm_head_weight.dim() != 2 or hidden.shape[-1] != lm_head_weight.shape[-1]:
        raise ValueError(
            f"shapes: hidden {tuple(hidden.shape)} must be [B, T, H] and lm_head_weight "
            f"{tuple(lm_head_weight.shape)} [V, H]"
        )
    if completion_ids.shape != hidden.shape[:2] or completion_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"completion_ids {tuple(completion_ids.shape)} and completion_mask "
            f"{tuple(completion_mask.shape)} must be {tuple(hidden.shape[:2])}"
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
    ratio = opts["vllm_is_ratio"]
    why = refusal(
        backend,
        loss_type=loss_type,
        importance_sampling_level=opts["importance_sampling_level"],
        beta=beta,
        kl_estimator=opts["kl_estimator"],
        off_policy_mask_threshold=opts["off_policy_mask_threshold"],
        top_entropy_quantile=opts["top_entropy_quantile"],
        entropy_bonus=opts["entropy_coef"] != 0.0,
        token_is_ratio=ratio is not None and ratio.shape[-1] > 1,
    )
    if why:
        raise NotImplementedError(f"backend={backend!r}: {why}")
    args = (hidden, lm_head_weight, completion_ids, completion_mask)
    if BACKENDS[backend].kind == "loss":  # the backend computes the whole loss (liger)
        loss, stats = BACKENDS[backend].load()(*args, advantages, old_logps, ref_logps, temperature=temperature, **opts)
        extra: list[Any] = []
        if return_logps:
            with torch.no_grad():
                extra.append(completion_logps(*args, backend="fused", temperature=temperature))
        if return_entropy:
            extra.append(None)
        return (loss, stats, *extra)
    if return_entropy or opts["top_entropy_quantile"] < 1.0 or opts["entropy_coef"] != 0.0:
        grad = opts["entropy_coef"] != 0.0
        logps, entropy = completion_logps_entropy(*args, backend=backend, temperature=temperature, grad=grad)
    else:
        logps, entropy = completion_logps(*args, backend=backend, temperature=temperature), None
    loss, stats = policy_loss_from_logps(
        logps, completion_mask, advantages, old_logps, ref_logps, **opts, entropy=entropy
    )
    out: list[Any] = [loss, stats]
    if return_logps:
        out.append(logps.detach())
    if return_entropy:
        out.append(None if entropy is None else entropy.detach())
    return tuple(out)


# `policy_loss_from_logps`'s options (its keyword-only parameters but the entropy, which grpo_loss computes)
_OPTIONS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(policy_loss_from_logps).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "entropy"
}
