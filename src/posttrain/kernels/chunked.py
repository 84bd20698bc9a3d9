"""`chunked` backend: TRL's own fused LM head, `trl.kernels.ChunkedLogProbFunction`.

This is exactly what `GRPOTrainer` runs through `add_fused_lm_head` (same vocabulary chunk, 32768):
an online log-sum-exp over `[4096, 32768]` tiles in the forward, and a backward that recomputes each
tile and turns it into the logits gradient (one GEMM forward, three in the backward with weight grad).
"""

from __future__ import annotations

import torch

# trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in TRL 1.16 (read at call time when it exists)
_DEFAULT_VOCAB_CHUNK = 32768


def chunked_logps(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probs [N] through TRL's ChunkedLogProbFunction."""
    from trl.kernels import ChunkedLogProbFunction

    try:
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE as chunk
    except ImportError:  # pragma: no cover - other TRL versions
        chunk = _DEFAULT_VOCAB_CHUNK
    logps, *_ = ChunkedLogProbFunction.apply(
        hidden, weight, None, targets, float(temperature), chunk, None, 1.0, ("log_probs",)
    )
    return logps
