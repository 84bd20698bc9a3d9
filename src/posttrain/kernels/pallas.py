"""`pallas` backend: the `fused` algorithm as JAX Pallas kernels (TPU; CPU with `interpret=True`).

`logps_jax(h, W, y, temperature)` is a `jax.custom_vjp` function for JAX training on TPU:
- forward kernel, grid (token blocks, vocab blocks), vocab the reduction axis: per tile
  `z = h W_blk^T / T` in fp32, online softmax into running max/sum, the target logit, and
  `e += softmax-weighted W_blk` (a flash-attention forward with keys = values = W);
  log-probs are `z_y - (m + log s)` and `e / s` is kept as the residual;
- backward kernels: `dh = g / T * (W_y - e)` (elementwise over token blocks: no GEMM, no recompute) and,
  only when the weight gradient is wanted, `dW = sum_i g_i (onehot - p_i)^T h_i / T`, recomputing each
  tile once (grid (vocab blocks, token blocks), tokens the reduction axis).
The vocabulary is padded to the block size with masked columns. Everything accumulates in fp32.

`pallas_logps` bridges it into torch (an autograd.Function calling the JAX forward and its VJP) so the
same tests and gradcheck run it. `jax` is imported lazily; `interpret` defaults to True off-TPU.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

TOKEN_BLOCK = 128
VOCAB_BLOCK = 512


def _interpret() -> bool:
    import jax

    return jax.default_backend() != "tpu"


@functools.cache
def _build():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def fwd_kernel(h_ref, w_ref, y_ref, e_ref, m_ref, s_ref, t_ref, *, vocab, bv):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _init():
            e_ref[...] = jnp.zeros_like(e_ref)
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            s_ref[...] = jnp.zeros_like(s_ref)
            t_ref[...] = jnp.zeros_like(t_ref)

        w = w_ref[...].astype(jnp.float32)
        z = jax.lax.dot_general(
            h_ref[...].astype(jnp.float32), w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
        )  # [bt, bv]
        cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, z.shape, 1)
        z = jnp.where(cols < vocab, z, -jnp.inf)
        t_ref[...] += jnp.sum(jnp.where(cols == y_ref[...], z, 0.0), axis=1, keepdims=True)
        m_old = m_ref[...]
        m_new = jnp.maximum(m_old, jnp.max(z, axis=1, keepdims=True))
        scale = jnp.exp(m_old - m_new)
        p = jnp.exp(z - m_new)
        s_ref[...] = s_ref[...] * scale + jnp.sum(p, axis=1, keepdims=True)
        e_ref[...] = e_ref[...] * scale + jnp.dot(p, w, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    def dh_kernel(wy_ref, e_ref, c_ref, o_ref):
        o_ref[...] = (wy_ref[...].astype(jnp.float32) - e_ref[...]) * c_ref[...]

    def dw_kernel(h_ref, w_ref, y_ref, lse_ref, g_ref, o_ref, *, vocab, bv):
        i = pl.program_id(1)

        @pl.when(i == 0)
        def _init():
            o_ref[...] = jnp.zeros_like(o_ref)

        h = h_ref[...].astype(jnp.float32)
        j = pl.program_id(0)
        z = jax.lax.dot_general(
            h, w_ref[...].astype(jnp.float32), (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
        )  # [bt, bv]
        cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, z.shape, 1)
        p = jnp.where(cols < vocab, jnp.exp(z - lse_ref[...]), 0.0)
        G = g_ref[...] * (jnp.where(cols == y_ref[...], 1.0, 0.0) - p)  # [bt, bv]
        o_ref[...] += jax.lax.dot_general(G, h, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)

    def _pad(x, n, axis=0):
        pad = (-x.shape[axis]) % n
        if not pad:
            return x
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, pad)
        return jnp.pad(x, widths)

    def forward(h, w, y, temperature, bt, bv):
        N, H = h.shape
        V = w.shape[0]
        hs = _pad(h.astype(jnp.float32) / temperature, bt)
        wp = _pad(w, bv)
        yp = _pad(y.astype(jnp.int32).reshape(-1, 1), bt)
        Np, Vp = hs.shape[0], wp.shape[0]
        vec = jax.ShapeDtypeStruct((Np, 1), jnp.float32)
        e, m, s, t = pl.pallas_call(
            functools.partial(fwd_kernel, vocab=V, bv=bv),
            grid=(Np // bt, Vp // bv),
            in_specs=[
                pl.BlockSpec((bt, H), lambda i, j: (i, 0)),
                pl.BlockSpec((bv, H), lambda i, j: (j, 0)),
                pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
            ],
            out_specs=[pl.BlockSpec((bt, H), lambda i, j: (i, 0))] + [pl.BlockSpec((bt, 1), lambda i, j: (i, 0))] * 3,
            out_shape=[jax.ShapeDtypeStruct((Np, H), jnp.float32), vec, vec, vec],
            interpret=_interpret(),
        )(hs, wp, yp)
        lse = m + jnp.log(s)
        logp = (t - lse)[:N, 0]
        return logp, (e / s)[:N], lse[:N]

    def grad_hidden(w, y, e, g, temperature, bt):
        N, H = e.shape
        wy = _pad(jnp.take(w, y, axis=0), bt)
        coef = _pad((g / temperature).astype(jnp.float32).reshape(-1, 1), bt)
        out = pl.pallas_call(
            dh_kernel,
            grid=(wy.shape[0] // bt,),
            in_specs=[pl.BlockSpec((bt, H), lambda i: (i, 0))] * 2 + [pl.BlockSpec((bt, 1), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((bt, H), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(wy.shape, jnp.float32),
            interpret=_interpret(),
        )(wy, _pad(e, bt), coef)
        return out[:N]

    def grad_weight(h, w, y, lse, g, temperature, bt, bv):
        V, H = w.shape
        hs = _pad(h.astype(jnp.float32) / temperature, bt)
        wp = _pad(w, bv)
        col = lambda x: _pad(x.reshape(-1, 1), bt)
        Np, Vp = hs.shape[0], wp.shape[0]
        out = pl.pallas_call(
            functools.partial(dw_kernel, vocab=V, bv=bv),
            grid=(Vp // bv, Np // bt),
            in_specs=[pl.BlockSpec((bt, H), lambda j, i: (i, 0)), pl.BlockSpec((bv, H), lambda j, i: (j, 0))]
            + [pl.BlockSpec((bt, 1), lambda j, i: (i, 0))] * 3,
            out_specs=pl.BlockSpec((bv, H), lambda j, i: (j, 0)),
            out_shape=jax.ShapeDtypeStruct((Vp, H), jnp.float32),
            interpret=_interpret(),
        )(hs, wp, col(y.astype(jnp.int32)), col(lse), col(g.astype(jnp.float32)))
        return out[:V]

    # compiled once per shape and static arguments (in interpret mode too, where it is most of the cost)
    forward = jax.jit(forward, static_argnums=(3, 4, 5))
    grad_hidden = jax.jit(grad_hidden, static_argnums=(4, 5))
    grad_weight = jax.jit(grad_weight, static_argnums=(5, 6, 7))

    @functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
    def logps(h, w, y, temperature=1.0, need_dw=True, bt=TOKEN_BLOCK, bv=VOCAB_BLOCK):
        return forward(h, w, y, temperature, bt, bv)[0]

    def logps_fwd(h, w, y, temperature, need_dw, bt, bv):
        logp, e, lse = forward(h, w, y, temperature, bt, bv)
        return logp, (h, w, y, e, lse)

    def logps_bwd(temperature, need_dw, bt, bv, res, g):
        h, w, y, e, lse = res
        dh = grad_hidden(w, y, e, g, temperature, bt).astype(h.dtype)
        dw = grad_weight(h, w, y, lse, g, temperature, bt, bv).astype(w.dtype) if need_dw else jnp.zeros_like(w)
        return dh, dw, np.zeros(y.shape, dtype=jax.dtypes.float0)

    logps.defvjp(logps_fwd, logps_bwd)
    return logps


def logps_jax(
    h,
    w,
    y,
    temperature: float = 1.0,
    need_dw: bool = True,
    token_block: int | None = None,
    vocab_block: int | None = None,
):
    """JAX entry point: per-token log-probs [N] (fp32) of y under softmax(h @ w.T / temperature)."""
    return _build()(
        h, w, y, float(temperature), bool(need_dw), int(token_block or TOKEN_BLOCK), int(vocab_block or VOCAB_BLOCK)
    )


def _to_jax(t: torch.Tensor):
    import jax.numpy as jnp

    t = t.detach().cpu()
    return jnp.asarray(t.float().numpy() if t.is_floating_point() else t.numpy())


class _PallasLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, need_dw, bt, bv):
        import jax

        fn = functools.partial(_build(), temperature=temperature, need_dw=need_dw, bt=bt, bv=bv)
        h, w, y = _to_jax(hidden), _to_jax(weight), _to_jax(targets)
        logp, ctx.vjp = jax.vjp(lambda h_, w_: fn(h_, w_, y), h, w)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return torch.from_numpy(np.asarray(logp).copy()).to(hidden.device)

    @staticmethod
    def backward(ctx, g):
        import jax.numpy as jnp

        dh, dw = ctx.vjp(jnp.asarray(g.detach().cpu().float().numpy()))
        to_t = lambda x, dt: torch.from_numpy(np.asarray(x).copy()).to(g.device, dt)
        grad_w = to_t(dw, ctx.dtypes[1]) if ctx.needs_input_grad[1] else None
        return to_t(dh, ctx.dtypes[0]), grad_w, None, None, None, None, None


def pallas_logps(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probs [N] (fp32) from torch tensors through the Pallas kernels (test/CPU bridge)."""
    if hidden.dtype == torch.float64:
        raise NotImplementedError("backend='pallas' computes in fp32; fp64 inputs are not supported")
    return _PallasLogProb.apply(
        hidden, weight, targets, float(temperature), bool(weight.requires_grad), TOKEN_BLOCK, VOCAB_BLOCK
    )
