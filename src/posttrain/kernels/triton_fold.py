"""The Triton kernels of the device path of `fused` (`posttrain.kernels.fused_device`): one launch per logits tile.

Both read an fp32 logits tile `Z [n, v] = h_blk W_blk^T` (not yet divided by the temperature T) that a GEMM has
just written, and write the tile the next GEMM reads:

- `fold_tile` (forward): per row, an exact maximum pass over the tile (which also picks up the target logit,
  reading only), then one pass that writes `P = exp(Z / T - m_new)` in the GEMM input dtype (bf16 for bf16
  inputs, as flash-attention rounds P for its PV GEMM) and accumulates in fp32 the running sum `s` (of the
  unrounded P, for the log-sum-exp), the sum `se` of P as stored (the normaliser of `e = P W / se`: rounding P
  perturbs the softmax weights of `e` but not their total) and `xs = sum P (Z / T - m)` (the entropy). It also
  writes the row's rescale factor `exp(m_old - m_new)` for the caller's `e *= scale`.
- `logits_grad_tile` (weight-gradient backward): `G = g / T * (onehot(y) - exp(Z / T - lse))`, the one-hot term
  folded in (no scatter, no boolean indexing), written in the GEMM input dtype for `dW += G^T h`.

Block sizes: one row per program, `[1, 2048]` loads at 8 warps (8 fp32 values per thread per load), with
`[ROWS, BLOCK]` accumulators reduced once after each pass. Measured on one H200 (experiments/gpu/fold_sweep.py, 20
configurations): on the device path's 2048 x 28800 and 4096 x 16128 tiles the fold moves 3.5 and 4.2 TB/s (reads Z
twice, writes P), about the card's copy bandwidth; the earlier 4 rows x 1024 took 20% longer.

Imports Triton, so `fused_device` imports it only when it first launches a kernel (TRITON_INTERPRET=1, for CPU
tensors, must be set before Triton's first import).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS = 1
BLOCK = 2048
NUM_WARPS = 8
# CPU tensors run only under TRITON_INTERPRET=1 (the tests), where every program costs Python time: many rows per
# program and short blocks (the tests' interpreted cases 0.8 s against 7 s with the GPU's blocks)
INTERPRETER_BLOCKS = (16, 256)


@triton.jit
def _to_output(x, out_ptr):
    # fp32 -> the output's dtype; bf16 rounded to nearest even by hand: Triton's interpreter truncates (a bias of
    # 2^-9 in P and G) where a GPU rounds, so this gives the CPU tests the GPU's bits
    if out_ptr.dtype.element_ty == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        x = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
    return x.to(out_ptr.dtype.element_ty)


@triton.jit
def _fold_kernel(
    z_ptr,
    z_stride,
    p_ptr,
    p_stride,
    targets_ptr,
    m_ptr,
    s_ptr,
    se_ptr,
    xs_ptr,
    tgt_ptr,
    scale_ptr,
    n_rows,
    n_cols,
    vocab_start,
    inv_t,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    z_rows = z_ptr + rows[:, None] * z_stride
    p_rows = p_ptr + rows[:, None] * p_stride
    local = tl.load(targets_ptr + rows, mask=row_ok, other=-1) - vocab_start
    # pass 1 reads only (P may be written over Z): the row max and the target logit, from the same loads
    # Elementwise [ROWS, BLOCK] accumulators, reduced across the block once after the loop: a reduction inside
    # the loop would synchronise the program's warps on every block of the memory-bound pass.
    acc_max = tl.full((ROWS, BLOCK), float("-inf"), tl.float32)
    acc_y = tl.zeros((ROWS, BLOCK), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = row_ok[:, None] & (cols[None, :] < n_cols)
        z = tl.load(z_rows + cols[None, :], mask=ok, other=float("-inf"))
        acc_max = tl.maximum(acc_max, z)
        acc_y += tl.where(ok & (cols[None, :] == local[:, None]), z, 0.0)
    tile_max = tl.max(acc_max, axis=1)
    z_y = tl.sum(acc_y, axis=1)
    hit = row_ok & (local >= 0) & (local < n_cols)
    tgt = tl.load(tgt_ptr + rows, mask=row_ok, other=0.0)
    tl.store(tgt_ptr + rows, tl.where(hit, z_y * inv_t, tgt), mask=row_ok)
    m_old = tl.load(m_ptr + rows, mask=row_ok, other=0.0)  # -inf before a row's first tile
    m_new = tl.maximum(m_old, tile_max * inv_t)  # T > 0: the max commutes with the scaling

    acc_total = tl.zeros((ROWS, BLOCK), tl.float32)
    acc_stored = tl.zeros((ROWS, BLOCK), tl.float32)
    acc_xs = tl.zeros((ROWS, BLOCK), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = row_ok[:, None] & (cols[None, :] < n_cols)
        z = tl.load(z_rows + cols[None, :], mask=ok, other=0.0)
        d = tl.where(ok, z * inv_t - m_new[:, None], 0.0)
        p = tl.where(ok, tl.exp(d), 0.0)
        p_out = _to_output(p, p_ptr)
        acc_total += p
        acc_stored += p_out.to(tl.float32)
        acc_xs += p * d
        tl.store(p_rows + cols[None, :], p_out, mask=ok)
    total = tl.sum(acc_total, axis=1)
    total_stored = tl.sum(acc_stored, axis=1)
    xs_tile = tl.sum(acc_xs, axis=1)

    scale = tl.exp(m_old - m_new)  # 0 on a row's first tile
    s_old = tl.load(s_ptr + rows, mask=row_ok, other=0.0)
    se_old = tl.load(se_ptr + rows, mask=row_ok, other=0.0)
    xs_old = tl.load(xs_ptr + rows, mask=row_ok, other=0.0)
    shift = tl.where(s_old > 0.0, m_old - m_new, 0.0)  # xs is relative to m: re-base it to m_new
    tl.store(s_ptr + rows, s_old * scale + total, mask=row_ok)
    tl.store(se_ptr + rows, se_old * scale + total_stored, mask=row_ok)
    tl.store(xs_ptr + rows, (xs_old + shift * s_old) * scale + xs_tile, mask=row_ok)
    tl.store(m_ptr + rows, m_new, mask=row_ok)
    tl.store(scale_ptr + rows, scale, mask=row_ok)


@triton.jit
def _logits_grad_kernel(
    z_ptr,
    z_stride,
    g_ptr,
    g_stride,
    targets_ptr,
    lse_ptr,
    coef_ptr,
    n_rows,
    n_cols,
    vocab_start,
    inv_t,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    local = tl.load(targets_ptr + rows, mask=row_ok, other=-1) - vocab_start
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    coef = tl.load(coef_ptr + rows, mask=row_ok, other=0.0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = row_ok[:, None] & (cols[None, :] < n_cols)
        z = tl.load(z_ptr + rows[:, None] * z_stride + cols[None, :], mask=ok, other=0.0)
        p = tl.exp(z * inv_t - lse[:, None])
        onehot = tl.where(cols[None, :] == local[:, None], 1.0, 0.0)
        out = coef[:, None] * (onehot - p)
        tl.store(g_ptr + rows[:, None] * g_stride + cols[None, :], _to_output(out, g_ptr), mask=ok)


def _blocks(Z: torch.Tensor) -> tuple[int, int]:
    """(rows per program, block columns) for a tile on Z's device."""
    return (ROWS, BLOCK) if Z.is_cuda else INTERPRETER_BLOCKS


def _grid(n: int, rows: int) -> tuple[int]:
    return (-(-n // rows),)


def fold_tile(
    Z: torch.Tensor,
    P: torch.Tensor,
    targets: torch.Tensor,
    vocab_start: int,
    inv_t: float,
    state: torch.Tensor,
) -> None:
    """Fold logits tile Z [n, v] (fp32, unit column stride) into the running row state and write P [n, v].

    `state` [6, n] fp32 holds per row: running max m (of z / T), sum s, stored-P sum se, entropy sum xs, target
    logit, and (output) the rescale factor for this tile; all but the last are updated in place. P may be Z.
    """
    n, v = Z.shape
    m, s, se, xs, tgt, scale = state
    rows, block = _blocks(Z)
    _fold_kernel[_grid(n, rows)](
        Z,
        Z.stride(0),
        P,
        P.stride(0),
        targets,
        m,
        s,
        se,
        xs,
        tgt,
        scale,
        n,
        v,
        vocab_start,
        inv_t,
        ROWS=rows,
        BLOCK=block,
        num_warps=NUM_WARPS,
    )


def logits_grad_tile(
    Z: torch.Tensor,
    G: torch.Tensor,
    targets: torch.Tensor,
    vocab_start: int,
    inv_t: float,
    lse: torch.Tensor,
    coef: torch.Tensor,
) -> None:
    """G [n, v] = coef * (onehot(targets - vocab_start) - exp(Z / T - lse)) from logits tile Z (G may be Z)."""
    n, v = Z.shape
    rows, block = _blocks(Z)
    _logits_grad_kernel[_grid(n, rows)](
        Z,
        Z.stride(0),
        G,
        G.stride(0),
        targets,
        lse,
        coef,
        n,
        v,
        vocab_start,
        inv_t,
        ROWS=rows,
        BLOCK=block,
        num_warps=NUM_WARPS,
    )
