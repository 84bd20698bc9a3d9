"""`eager` backend: materialized `[N, V]` logits and an fp32 log-softmax — the reference.

The projection itself runs in fp32 (fp64 for fp64 inputs, which is what the gradcheck reference uses),
so bf16 inputs are not rounded to bf16 logits before the softmax.
"""

from __future__ import annotations

import torch


def _log_softmax(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    logits = hidden.to(dtype) @ weight.to(dtype).t()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def eager_logps(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log_softmax(hidden @ weight.T / temperature)[targets]; hidden [N, H], weight [V, H] -> [N]."""
    return _log_softmax(hidden, weight, temperature).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def eager_logps_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`eager_logps` and the entropy [N] of the same softmax, both differentiable (TRL's entropy bonus)."""
    logp = _log_softmax(hidden, weight, temperature)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)
