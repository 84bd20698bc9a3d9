"""`grpo_loss`: the GRPO policy loss from hidden states, dispatched to a kernel backend.

Every backend except `liger` only computes the per-token log-probabilities of the completion tokens
(`logp = log_softmax(hidden @ W.T / temperature)[target]`, in fp32); the loss itself is
`policy_loss_from_logps`, a line-by-line transcription of TRL 1.16 `GRPOTrainer._compute_loss` on the
small `[B, T]` tensors, shared by all of them. So the backends can only differ in how they get the
log-probabilities and their gradients, never in the loss semantics.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from posttrain.kernels.registry import BACKENDS, IS_LEVELS, KL_BIAS_CORRECTION, KL_ESTIMATORS, LOSS_TYPES


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
) -> tuple[torch.Tensor, dict[str, float]]:
    """TRL 1.16 `GRPOTrainer._compute_loss` from per-token log-probs `logps` [B, T].

    Single process, no gradient accumulation: `dapo` divides by the number of mask tokens (TRL's
    `num_items_in_batch`), and nothing is divided by the accumulation steps (the caller does that).
    `vllm_is_ratio` ([B, T] or [B, 1], TRL's `inputs["importance_sampling_ratio"]`) multiplies the clipped
    policy term before the KL is added, as TRL does when vLLM's sampling log-probs differ from the trainer's.
    """
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

    coef_1 = importance_weights(logps, old, mask, importance_sampling_level)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if vllm_is_ratio is not None:
        per_token_loss = per_token_loss * vllm_is_ratio.to(dtype)

    kl = None
    if ref_logps is not None:
        kl = per_token_kl(logps, ref_logps, kl_estimator)
        if kl_bias_correction:
            kl = kl * coef_1
        if beta != 0.0:
            per_token_loss = per_token_loss + beta * kl

    if loss_type == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        T = max_completion_length if max_completion_length is not None else logps.shape[1]
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * T)
    else:  # dapo
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)

    with torch.no_grad():
        stats = _stats(loss, kl, coef_1, advantages, mask, epsilon_low, epsilon_high)
    return loss, stats


def _global_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # TRL's `global_masked_mean`: one value per sequence at sequence level (empty rows count), else per token
    if x.shape[1] == 1:
        return x.sum() / max(x.shape[0], 1)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def _stats(loss, kl, coef_1, advantages, mask, epsilon_low, epsilon_high) -> dict[str, float]:
    low = ((coef_1 < 1 - epsilon_low) & (advantages < 0)).to(mask.dtype)
    high = ((coef_1 > 1 + epsilon_high) & (advantages > 0)).to(mask.dtype)
    region = torch.maximum(low, high)
    nan = torch.tensor(math.nan, dtype=mask.dtype, device=mask.device)
    if kl is not None:
        kl_mean = (kl * mask).sum() / mask.sum().clamp(min=1.0)
        kl_tokens = kl[mask > 0]
        kl_p95 = torch.quantile(kl_tokens.float(), 0.95).to(mask.dtype) if kl_tokens.numel() else nan
    else:
        kl_mean = kl_p95 = nan
    vals = torch.stack(
        [
            loss.detach(),
            kl_mean,
            kl_p95,
            _global_masked_mean(region, mask),
            _global_masked_mean(low, mask),
            _global_masked_mean(high, mask),
        ]
    ).tolist()
    keys = ("policy_loss", "kl_mean", "kl_p95", "clip_ratio", "clip_ratio/low_mean", "clip_ratio/high_mean")
    return dict(zip(keys, vals))


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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`completion_logps` and the per-token entropy [B, T] (detached, 0 where masked) from the same pass, for the
    backends that have one (`Backend.entropy_function`); None for the others."""
    _backend_fn(backend, "logps")
    fn = BACKENDS[backend].load_with_entropy()
    if fn is None:
        return completion_logps(
            hidden, lm_head_weight, completion_ids, completion_mask, backend=backend, temperature=temperature
        ), None
    logps, entropy = _completion_outputs(fn, 2, hidden, lm_head_weight, completion_ids, completion_mask, temperature)
    return logps, entropy.detach()


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
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_type: str = "grpo",
    kl_estimator: str = "k3",
    importance_sampling_level: str = "token",
    temperature: float = 1.0,
    max_completion_length: int | None = None,
    kl_bias_correction: bool = KL_BIAS_CORRECTION,
    vllm_is_ratio: torch.Tensor | None = None,
    return_logps: bool = False,
    return_entropy: bool = False,
) -> tuple:
    """GRPO policy loss of completions, from final-norm hidden states and the LM head weight.

    Args mirror TRL's `GRPOTrainer` (see the package docstring for the full contract); `kl_bias_correction` is
    TRL's `use_bias_correction_kl`, `vllm_is_ratio` its `inputs["importance_sampling_ratio"]`. Returns
    `(loss, stats)`: a scalar loss (not divided by gradient-accumulation steps) and floats
    `policy_loss, kl_mean, kl_p95, clip_ratio, clip_ratio/low_mean, clip_ratio/high_mean`
    (`kl_*` are NaN without `ref_logps`). With `return_logps`, also the detached per-token log-probs [B, T] (for
    metrics over several micro-batches or processes; `liger`, which never forms them, gets them from `fused`).
    With `return_entropy`, last the detached per-token entropy [B, T] of the policy's softmax, from the same pass
    where the backend has one (`fused`), else None.
    """
    _check_options(loss_type, kl_estimator, importance_sampling_level, beta, ref_logps, temperature)
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
    kwargs: dict[str, Any] = dict(
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        loss_type=loss_type,
        kl_estimator=kl_estimator,
        importance_sampling_level=importance_sampling_level,
        max_completion_length=max_completion_length,
        kl_bias_correction=kl_bias_correction,
        vllm_is_ratio=vllm_is_ratio,
    )
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
    if BACKENDS[backend].kind == "loss":  # the backend computes the whole loss (liger)
        loss, stats = BACKENDS[backend].load()(
            hidden,
            lm_head_weight,
            completion_ids,
            completion_mask,
            advantages,
            old_logps,
            ref_logps,
            temperature=temperature,
            **kwargs,
        )
        extra: list[Any] = []
        if return_logps:
            with torch.no_grad():
                args = (hidden, lm_head_weight, completion_ids, completion_mask)
                extra.append(completion_logps(*args, backend="fused", temperature=temperature))
        if return_entropy:
            extra.append(None)
        return (loss, stats, *extra)
    args = (hidden, lm_head_weight, completion_ids, completion_mask)
    if return_entropy:
        logps, entropy = completion_logps_entropy(*args, backend=backend, temperature=temperature)
    else:
        logps, entropy = completion_logps(*args, backend=backend, temperature=temperature), None
    loss, stats = policy_loss_from_logps(logps, completion_mask, advantages, old_logps, ref_logps, **kwargs)
    out: list[Any] = [loss, stats]
    if return_logps:
        out.append(logps.detach())
    if return_entropy:
        out.append(entropy)
    return tuple(out)
