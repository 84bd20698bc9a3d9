"""`triton` backend: the `fused` algorithm with each logits tile folded by one Triton kernel.

Per `[tokens, vocab]` tile: the GEMM `Z = h W_blk^T` (cuBLAS), then `_fold_kernel` (one program per
token row) reads the row once for its maximum and once more to overwrite it with `exp(Z - m)`, summing
as it goes, and picks up the target logit; then `acc = acc * scale + Z @ W_blk`. The reference maximum
`m` is lazy: it only moves when a tile's maximum exceeds it by more than 20 (so every stored term is
at most e^20 and `scale` is 1 for almost all rows). The backward is `fused`'s (elementwise for hidden).

Runs on CUDA, or on CPU tensors with `TRITON_INTERPRET=1` (set before the first call; the kernel is
built lazily so the variable is read then). Tests run it that way.
"""

from __future__ import annotations

import functools

import torch

from posttrain.kernels.fused import FusedLinearLogProb

TOKEN_BLOCK = 256
VOCAB_BLOCK = 2048
LAZY_MAX = 20.0
_BLOCK = 1024


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _fold_kernel(
        z_ptr,
        z_stride,
        targets_ptr,
        m_ptr,
        s_ptr,
        tgt_ptr,
        scale_ptr,
        vocab_start,
        n_cols,
        lazy_max,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        row_ptr = z_ptr + row * z_stride
        m_old = tl.load(m_ptr + row)
        local = tl.load(targets_ptr + row) - vocab_start
        if (local >= 0) & (local < n_cols):
            tl.store(tgt_ptr + row, tl.load(row_ptr + local))
        tile_max = float("-inf")
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            z = tl.load(row_ptr + offs, mask=offs < n_cols, other=float("-inf"))
            tile_max = tl.maximum(tile_max, tl.max(z, axis=0))
        new_m = tl.where(tile_max > m_old + lazy_max, tile_max, m_old)
        scale = tl.exp(m_old - new_m)
        total = 0.0
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            inside = offs < n_cols
            z = tl.load(row_ptr + offs, mask=inside, other=float("-inf"))
            p = tl.where(inside, tl.exp(z - new_m), 0.0)
            total += tl.sum(p, axis=0)
            tl.store(row_ptr + offs, p, mask=inside)
        tl.store(s_ptr + row, tl.load(s_ptr + row) * scale + total)
        tl.store(m_ptr + row, new_m)
        tl.store(scale_ptr + row, scale)

    return _fold_kernel


def fold_tile(
    Z: torch.Tensor, targets: torch.Tensor, vocab_start: int, m: torch.Tensor, s: torch.Tensor, tgt: torch.Tensor
) -> torch.Tensor:
    """Overwrite Z [n, v] (fp32, unit column stride) with exp(Z - m_new); update m, s, tgt [n]; return scale [n]."""
    n, v = Z.shape
    scale = torch.empty_like(s)
    _kernel()[(n,)](Z, Z.stride(0), targets, m, s, tgt, scale, vocab_start, v, LAZY_MAX, BLOCK=_BLOCK)
    return scale


def triton_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> torch.Tensor:
    """Per-token log-probs [N] (fp32) through `FusedLinearLogProb` with the Triton tile fold."""
    if hidden.dtype == torch.float64:
        raise NotImplementedError("backend='triton' computes in fp32; fp64 inputs are not supported")
    return FusedLinearLogProb.apply(
        hidden,
        weight,
        targets.contiguous(),
        float(temperature),
        int(token_block or TOKEN_BLOCK),
        int(vocab_block or VOCAB_BLOCK),
        fold_tile,
    )[0]
