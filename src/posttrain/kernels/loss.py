"""`grpo_loss`: the GRPO policy loss from hidden states, dispatched to a kernel backend.

Every backend except `liger` only computes the per-token log-probabilities of the completion tokens
(`logp = log_softmax(hidden @ W.T / temperature)[target]`, in fp32); the loss itself is
`posttrain.kernels.policy_loss.policy_loss_from_logps`, a line-by-line transcription of TRL 1.16
`GRPOTrainer._compute_loss` on the small `[B, T]` tensors, shared by all of them. So the backends can only differ
in how they get the log-probabilities and their gradients, never in the loss semantics.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from posttrain.kernels.policy_loss import _check_options, policy_loss_from_logps
from posttrain.kernels.registry import BACKENDS, refusal


def lm_head_gathered(*params: torch.Tensor | None) -> AbstractContextManager:
    """TRL's `maybe_gather_lm_head_ctx`: gathers ZeRO-3-partitioned LM-head parameters for a direct read.

    A null context unless DeepSpeed is loaded (ZeRO-3 cannot be active otherwise), so the kernels never import TRL
    or DeepSpeed on their own.
    """
    if "deepspeed" not in sys.modules:
        return nullcontext()
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    return maybe_gather_lm_head_ctx(*params)  # type: ignore[arg-type]  # the LM head's parameters


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
    Returns `(loss, stats)`: a scalar loss and a `DeviceStats` mapping (floats on first read, `stats.tensor(name)`
    without a transfer) of `policy_loss`, `kl_mean`, `kl_p95` (NaN without `ref_logps`),
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
