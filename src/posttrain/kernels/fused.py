"""`fused` backend: per-token log-probs whose hidden-state gradient is finished in the forward pass.

For z = h W^T / T and logp = z_y - logsumexp(z), the gradient with respect to h is

    d logp / d h = (W_y - sum_j p_j W_j) / T = (W_y - e) / T,   e = softmax(z) @ W,

and `e` does not depend on the upstream gradient. So the forward streams over `[token, vocab]` tiles and
accumulates, with an online softmax, both log-sum-exp *and* `e` -- a flash-attention forward whose keys
and values are both W: two GEMMs per tile (`Z = h W_blk^T`, `e += exp(Z - m) W_blk`), nothing else of
size `[tokens, V]` kept. The backward is elementwise, `dh = g / T * (W_y - e)`, written over `e`'s
storage: no GEMM, no recomputation. When the LM head weight needs a gradient, the backward recomputes each
tile once for `dW = G^T h` (G = g (onehot - p) / T): four GEMMs in all, like any method that keeps no
logits.

Three implementations of the forward:

- CPU, fp32/bf16 (`CPU_FLASH`): it *is* attention with queries = hidden, keys = values = W, so it runs
  ATen's CPU flash-attention kernel (`aten::_scaled_dot_product_flash_attention_for_cpu`, scale 1/T), which
  returns exactly `e` and the fp32 log-sum-exp. Its `[256 tokens x 512 vocab]` blocks stay in cache and
  the max/exp/sum pass is fused into one. In fp32 both implementations are at the two-GEMM limit on a quiet
  machine; in bf16 the flash path is 2.7-3.3x faster than the tile loop, which upcasts (measured in
  experiments/kernels/results/report.md and LOG.md).
  bf16 inputs (`BF16_NATIVE`) run bf16 GEMMs with fp32 accumulation (AMX where the CPU has it): the logits,
  the softmax and the log-sum-exp stay fp32, only `e` (gradient only) comes back rounded to bf16. There the
  kernel packs a copy of keys and values, so the vocabulary goes in chunks (a 64 MiB copy at most, chunks
  merged by their log-sum-exp); fp32 makes one call. The target logit is a separate N x H dot product.
- CUDA, fp32/bf16/fp16: `posttrain.kernels.fused_device` (the `triton` backend's code): tiles of thousands of
  tokens x tens of thousands of vocabulary rows, bf16 tensor-core GEMMs with fp32 output, one Triton kernel per
  tile for the max/exp/sum fold, no host synchronisation. The CPU tile sizes below never reach the GPU.
- Everywhere else (fp64, other devices): the torch tile loop, tiles of
  TOKEN_BLOCK x VOCAB_BLOCK accumulated in fp32 (bf16 inputs upcast one vocabulary block at a time), with a
  lazy maximum: each row keeps a reference `m` (the first tile's row maximum) and tiles are exponentiated
  as `exp(Z - m)` without a per-tile max pass; a tile whose row sum leaves [0, 2^100) is recomputed exactly
  with a new reference and the row's running sums are rescaled. Since fp32 has range 2^127 this keeps every
  kept term finite and the dominant ones normal.
"""

from __future__ import annotations

import torch

from .loss import lm_head_gathered

TOKEN_BLOCK = 1024  # tile loop
VOCAB_BLOCK = 2048
_OVERFLOW = 2.0**100
CPU_FLASH = True  # CPU fp32/bf16: ATen's flash-attention kernel (False: the tile loop)
BF16_NATIVE = True  # flash path, bf16 inputs: bf16 GEMMs, fp32 accumulation (False: fp32 GEMMs on upcast chunks)
FLASH_CHUNK: int | None = None  # vocabulary rows per flash call; None: all of V, or the copy budget below
_FLASH_COPY_BYTES = 64 * 2**20  # bf16 (packed keys + values) or upcast weight copy, 4 * chunk * H bytes
_GATHER_BYTES = 8 * 2**20  # gathered W_y rows per block (forward target logits, backward)
_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _fold_tile(
    Z: torch.Tensor, m: torch.Tensor, s: torch.Tensor, acc: torch.Tensor, w_blk: torch.Tensor, exact: bool
) -> bool:
    """Fold logits tile Z [n, v] (overwritten) into the running reference max m, sum s [n] and acc [n, H].

    With `exact=False` the tile is exponentiated against the current reference; if a row sum leaves
    [0, 2^100) nothing is folded and False is returned: the caller recomputes Z and folds it exactly.
    """
    if exact:
        new_m = torch.maximum(m, Z.amax(1))
        scale = torch.exp(m - new_m).nan_to_num_(0.0)  # first tile: exp(-inf - x) = 0; nothing folded yet
        s.mul_(scale)
        acc.mul_(scale.unsqueeze(1))
        m.copy_(new_m)
    Z.sub_(m.unsqueeze(1)).exp_()
    st = Z.sum(1)
    if not exact and not bool((st < _OVERFLOW).all()):
        return False
    s.add_(st)
    acc.addmm_(Z, w_blk)
    return True


def _on_device_path(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    from .fused_device import DTYPES

    return hidden.is_cuda and hidden.dtype in DTYPES and weight.dtype in DTYPES


def _use_flash(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    ok = (torch.float32, torch.bfloat16)
    return (
        CPU_FLASH
        and _flash is not None
        and hidden.device.type == "cpu"
        and hidden.dtype in ok
        and weight.dtype in ok
        and hidden.shape[0] > 0
        and weight.shape[0] > 0
    )  # the kernel divides by both (SIGFPE)


def _flash_forward(hidden: torch.Tensor, weight: torch.Tensor, inv_t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse [N], e [N, H]), fp32, from ATen's CPU flash-attention kernel, one vocabulary chunk per call."""
    N, H = hidden.shape
    V = weight.shape[0]
    native = BF16_NATIVE and hidden.dtype == weight.dtype == torch.bfloat16
    dt = torch.bfloat16 if native else torch.float32
    # the kernel reads rows as contiguous (it does not check): it gets contiguous copies where needed
    copied = native or weight.dtype != dt or not weight.is_contiguous()  # bf16: it packs keys + values itself
    chunk = FLASH_CHUNK or (max(512, _FLASH_COPY_BYTES // (4 * H)) if copied else V)
    assert _flash is not None  # _use_flash checked it
    q = hidden.to(dt).contiguous()[None, None]
    lse: torch.Tensor | None = None
    e: torch.Tensor | None = None
    for v0 in range(0, V, chunk):
        w = weight[v0 : v0 + chunk].to(dt).contiguous()[None, None]
        out, lse_c = _flash(q, w, w, scale=inv_t)
        out, lse_c = out.reshape(N, H), lse_c.reshape(N)
        if lse is None or e is None:
            lse, e = lse_c, out.to(torch.float32)
            continue
        new = torch.logaddexp(lse, lse_c)  # e = (e exp(lse) + out exp(lse_c)) / exp(new), no fp32 copy of out
        e.mul_(torch.exp(lse - new).unsqueeze(1)).addcmul_(out, torch.exp(lse_c - new).unsqueeze(1))
        lse = new
    assert lse is not None and e is not None  # V > 0: _use_flash checked it
    return lse, e


def _row_block(H: int) -> int:
    """Tokens per gathered `W_y` block: an 8 MiB fp32 temporary, and few ops (each one a parallel region)."""
    return max(256, _GATHER_BYTES // (4 * H))


def _target_logits(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, inv_t: float) -> torch.Tensor:
    """z_y [N] = h . W_y / T in fp32, a block of gathered rows of W at a time."""
    N, H = hidden.shape
    z = torch.empty(N, dtype=torch.float32, device=hidden.device)
    rows = _row_block(H)
    for t0 in range(0, N, rows):
        t1 = min(t0 + rows, N)
        w_y = weight.index_select(0, targets[t0:t1]).to(torch.float32)
        torch.linalg.vecdot(hidden[t0:t1].to(torch.float32), w_y, out=z[t0:t1])
    return z.mul_(inv_t)


def _tile_forward(hidden, weight, targets, temperature, token_block, vocab_block):
    """(logp, lse, e) by the torch tile loop (lazy maximum)."""
    N, H = hidden.shape
    V = weight.shape[0]
    acc_dtype = torch.promote_types(hidden.dtype, torch.float32)
    dev = hidden.device
    hs = hidden.to(acc_dtype)
    if temperature != 1.0:
        hs = hs * (1.0 / temperature)
    e = torch.zeros(N, H, dtype=acc_dtype, device=dev)  # becomes sum_j p_j W_j, then d hidden
    m = torch.full((N,), float("-inf"), dtype=acc_dtype, device=dev)
    s = torch.zeros(N, dtype=acc_dtype, device=dev)
    tgt = torch.zeros(N, dtype=acc_dtype, device=dev)
    buf = torch.empty(min(N, token_block) * min(V, vocab_block), dtype=acc_dtype, device=dev)
    for v0 in range(0, V, vocab_block):
        v1 = min(v0 + vocab_block, V)
        w_blk = weight[v0:v1].to(acc_dtype)
        for t0 in range(0, N, token_block):
            t1 = min(t0 + token_block, N)
            Z = buf[: (t1 - t0) * (v1 - v0)].view(t1 - t0, v1 - v0)
            torch.mm(hs[t0:t1], w_blk.t(), out=Z)
            loc = targets[t0:t1] - v0
            inside = (loc >= 0) & (loc < v1 - v0)
            z_y = Z.gather(1, loc.clamp(0, v1 - v0 - 1).unsqueeze(1)).squeeze(1)
            tgt[t0:t1] = torch.where(inside, z_y, tgt[t0:t1])
            if not _fold_tile(Z, m[t0:t1], s[t0:t1], e[t0:t1], w_blk, exact=v0 == 0):
                torch.mm(hs[t0:t1], w_blk.t(), out=Z)  # rare: a row max far above its reference
                _fold_tile(Z, m[t0:t1], s[t0:t1], e[t0:t1], w_blk, exact=True)
    lse = m + torch.log(s)
    e.div_(s.unsqueeze(1))
    return tgt - lse, lse, e


class FusedLinearLogProb(torch.autograd.Function):
    """logp [N] = log_softmax(hidden @ weight.T / T)[targets], never holding more than one tile of logits, and the
    entropy [N] of that softmax (no gradient): H = lse - sum_j p_j z_j = lse - h . e / T, from the same `e`."""

    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        token_block: int,
        vocab_block: int,
    ):
        if _use_flash(hidden, weight):
            lse, e = _flash_forward(hidden, weight, 1.0 / temperature)
            logp = _target_logits(hidden, weight, targets, 1.0 / temperature) - lse
        else:
            logp, lse, e = _tile_forward(hidden, weight, targets, temperature, token_block, vocab_block)
        entropy = lse - torch.linalg.vecdot(hidden.to(e.dtype), e) / temperature
        ctx.mark_non_differentiable(entropy)
        ctx.save_for_backward(hidden, weight, targets, lse, e)
        ctx.temperature = temperature
        ctx.blocks = (token_block, vocab_block)
        ctx.consumed = False
        return logp, entropy.clamp_(min=0.0)  # >= 0 exactly; rounding of e (bf16 path) can dip below

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None = None):
        hidden, weight, targets, lse, e = ctx.saved_tensors
        if ctx.consumed:
            raise RuntimeError(
                "FusedLinearLogProb.backward: the forward's buffer was already turned into the "
                "gradient; backward through it twice is not supported"
            )
        ctx.consumed = True
        inv_t = 1.0 / ctx.temperature
        g = grad_logp.to(e.dtype)
        N = hidden.shape[0]
        token_block, vocab_block = ctx.blocks
        grad_w = grad_h = None
        with lm_head_gathered(weight):  # ZeRO-3 re-partitions the head after the forward: gather it again
            if ctx.needs_input_grad[1]:
                hs = hidden.to(e.dtype) * inv_t
                grad_w = _weight_grad(hs, weight, targets, lse, g, token_block, vocab_block)
            if ctx.needs_input_grad[0]:
                grad_h = e  # in place: dh = g/T * (W_y - e), a token block at a time
                rows = _row_block(hidden.shape[1])
                for t0 in range(0, N, rows):
                    t1 = min(t0 + rows, N)
                    blk = grad_h[t0:t1]
                    w_y = weight.index_select(0, targets[t0:t1]).to(e.dtype)
                    blk.sub_(w_y).mul_((-inv_t * g[t0:t1]).unsqueeze(1))
                grad_h = grad_h.to(hidden.dtype)
        return grad_h, grad_w, None, None, None, None


def _weight_grad(hs, weight, targets, lse, g, token_block, vocab_block):
    """dW = sum_i g_i (onehot(y_i) - p_i)^T h_i / T, recomputing each logits tile once (fp32)."""
    V = weight.shape[0]
    N = hs.shape[0]
    grad_w = torch.zeros(weight.shape, dtype=hs.dtype, device=hs.device)
    rows = torch.arange(N, device=hs.device)
    for v0 in range(0, V, vocab_block):
        v1 = min(v0 + vocab_block, V)
        w_blk = weight[v0:v1].to(hs.dtype)
        for t0 in range(0, N, token_block):
            t1 = min(t0 + token_block, N)
            Z = torch.mm(hs[t0:t1], w_blk.t())
            Z.sub_(lse[t0:t1].unsqueeze(1)).exp_().mul_(-g[t0:t1].unsqueeze(1))
            loc = targets[t0:t1] - v0
            inside = (loc >= 0) & (loc < v1 - v0)
            if bool(inside.any()):
                r = rows[: t1 - t0][inside]
                Z[r, loc[inside]] += g[t0:t1][inside]
            grad_w[v0:v1].addmm_(Z.t(), hs[t0:t1])
    return grad_w.to(weight.dtype)


def fused_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> torch.Tensor:
    """Per-token log-probs [N] (fp32; fp64 for fp64 inputs) through `FusedLinearLogProb`, or on CUDA through
    `fused_device` (whose own tile sizes apply unless given here).

    CPU tile sizes default to the module's TOKEN_BLOCK x VOCAB_BLOCK (read at call time).
    """
    if _on_device_path(hidden, weight):
        from .fused_device import device_logps

        return device_logps(hidden, weight, targets, temperature, token_block, vocab_block)
    blocks = int(token_block or TOKEN_BLOCK), int(vocab_block or VOCAB_BLOCK)
    return FusedLinearLogProb.apply(hidden, weight, targets, float(temperature), *blocks)[0]


def fused_logps_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused_logps` and the per-token entropy of softmax(hidden @ weight.T / T) [N] (detached), one pass."""
    if _on_device_path(hidden, weight):
        from .fused_device import device_logps_entropy

        return device_logps_entropy(hidden, weight, targets, temperature)
    return FusedLinearLogProb.apply(hidden, weight, targets, float(temperature), TOKEN_BLOCK, VOCAB_BLOCK)
