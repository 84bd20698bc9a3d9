"""`chunked` backend: TRL's own fused LM head, `trl.kernels.ChunkedLogProbFunction`.

This is exactly what `GRPOTrainer` runs through `add_fused_lm_head` (same vocabulary chunk, 32768):
an online log-sum-exp over `[4096, 32768]` tiles in the forward, and a backward that recomputes each
tile and turns it into the logits gradient (one GEMM forward, three in the backward with weight grad).
With the entropy (`chunked_logps_entropy`) it is TRL's policy pass itself, entropy gradient included.
"""

from __future__ import annotations

import torch

# trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in TRL 1.16 (read at call time when it exists)
_DEFAULT_VOCAB_CHUNK = 32768


def _chunked(hidden, weight, targets, temperature, outputs: tuple[str, ...]):
    from trl.kernels import ChunkedLogProbFunction

    try:
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE as chunk
    except ImportError:  # pragma: no cover - other TRL versions
        chunk = _DEFAULT_VOCAB_CHUNK
    return ChunkedLogProbFunction.apply(hidden, weight, None, targets, float(temperature), chunk, None, 1.0, outputs)


def chunked_logps(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probs [N] through TRL's ChunkedLogProbFunction."""
    return _chunked(hidden, weight, targets, temperature, ("log_probs",))[0]


def chunked_logps_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs and entropy [N] from one ChunkedLogProbFunction pass, both differentiable."""
    logps, entropy, *_ = _chunked(hidden, weight, targets, temperature, ("log_probs", "entropy"))
    return logps, entropy
