"""Per-token log-probabilities (and entropies) of completion tokens from hidden states, dispatched to a backend.

Every backend computes `logp = log_softmax(hidden @ W.T / temperature)[target]` in fp32, with its own backward and
without a `[tokens, vocab]` tensor (but `eager`, the reference); the GRPO loss on them is TRL's own
`GRPOTrainer._compute_loss` (`posttrain.algos.grpo.kernel_logps`), so backends can only differ in how they get the
log-probabilities and their gradients, never in the loss semantics.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

from posttrain.kernels.registry import BACKENDS


def lm_head_gathered(*params: torch.Tensor | None) -> AbstractContextManager:
    """TRL's `maybe_gather_lm_head_ctx`: gathers ZeRO-3-partitioned LM-head parameters for a direct read.

    A null context unless DeepSpeed is loaded (ZeRO-3 cannot be active otherwise), so the kernels never import TRL
    or DeepSpeed on their own.
    """
    if "deepspeed" not in sys.modules:
        return nullcontext()
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    return maybe_gather_lm_head_ctx(*params)  # type: ignore[arg-type]  # the LM head's parameters


def _backend_fn(backend: str) -> Callable:
    entry = BACKENDS.get(backend)
    if entry is None:
        raise ValueError(f"backend must be one of {tuple(BACKENDS)}, got {backend!r}")
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
    fn = _backend_fn(backend)
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
    _backend_fn(backend)
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
