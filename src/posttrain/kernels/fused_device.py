"""The `fused` policy-loss algorithm on an accelerator: large tiles, tensor-core GEMMs, one Triton fold per tile.

The mathematics is `fused`'s (see its docstring): the forward streams over `[token, vocab]` tiles and accumulates,
with an online softmax, the log-sum-exp and `e = softmax(z) @ W`; the hidden gradient `dh = g / T (W_y - e)` is
elementwise; the weight gradient recomputes each tile. `kernels=fused` runs this on CUDA, `kernels=triton` on any
device (on CPU only under TRITON_INTERPRET=1: that is how the tests run it).

Per tile of TN tokens x TV vocabulary rows, four launches in the forward and three in the weight backward:

1. `Z = h_blk W_blk^T` into an fp32 buffer. bf16/fp16 inputs: a tensor-core GEMM of the inputs as they are with
   fp32 output (`torch.mm(..., out_dtype=torch.float32)`), so the logits are never rounded to bf16; fp32 inputs:
   an fp32 GEMM (TF32 where `torch.set_float32_matmul_precision("high")`, which the GPU profiles set).
2. `triton_fold.fold_tile`: exact row max, then `P = exp(Z / T - m_new)` written in the input dtype, fp32 sums,
   target logit, rescale factor (see that module).
3. `e = e * scale + P W_blk` (the rescale is one elementwise op; the GEMM is bf16 x bf16 with fp32 output
   accumulated into `e`). Backward: `Z` again, `triton_fold.logits_grad_tile` writes `G = g/T (onehot - p)`,
   `dW_blk += G^T h_blk` (bf16 GEMM, fp32 accumulator per vocabulary tile, rounded to the weight dtype once).

Tile sizes: TN = N in balanced tiles of at most MAX_TOKEN_TILE tokens, TV = as many vocabulary rows as keep the
fp32 logits tile within LOGITS_TILE_BYTES (256 MiB), balanced and a multiple of 128. N = 2048, V = 201088:
2048 x 28800 (7 vocabulary tiles); N = 8192, V = 128256: 4096 x 16128 (2 x 8 tiles). Workspace beyond the
outputs (`e`/`dh` [N, H] fp32, [N] row state): the logits tile, plus for bf16 inputs its bf16 P/G copy (128 MiB),
plus in the weight backward an fp32 `[TV, H]` accumulator when the weight is not fp32 (TV x H x 4 bytes, 316 MiB
at 28800 x 2880) and, for mixed input dtypes, an fp32 copy of the vocabulary tile of W. `TOKEN_BLOCK` /
`VOCAB_BLOCK` (or the function arguments) override the tile sizes; the tests use small ones to span many tiles.

No host synchronisation: the loops run over ranges fixed by the shapes, every per-row decision (max, rescale,
target in this tile, one-hot) is taken on the device inside the kernels, and nothing reads a device value back
(no `.item()`, `bool(tensor)`, `nonzero` or boolean-mask indexing).

Accuracy (fp64 reference): fp32 inputs are within fp32 rounding (1e-5; with TF32 on, the GEMMs' own ~1e-3).
bf16 inputs: the logits, softmax, log-sum-exp and entropy are fp32, so log-probs and entropy stay within ~1e-5;
P and G are rounded to bf16 for the second GEMM, and `e` is normalised by the sum of the P values as rounded, so
rounding perturbs the softmax weights but not their total. Gradients come back in bf16 (rounding 2^-9): max
|error| / max |gradient| 1.6-2.9e-3 for the hidden and 2.3-3.5e-3 for the weight gradient in the interpreter
tests (experiments/kernels/results/report.md and LOG.md).

On CPU (interpreter, tests) the fp32-output GEMM of bf16 inputs (`aten::mm.dtype`, CUDA only in torch 2.13) is
stood in for by an fp32 GEMM of upcast copies: the same exact products (bf16 x bf16 fits fp32) and fp32 sums.
"""

from __future__ import annotations

import torch

from posttrain.kernels.loss import lm_head_gathered

MAX_TOKEN_TILE = 4096
LOGITS_TILE_BYTES = 256 * 2**20  # one fp32 [TN, TV] logits tile
_VOCAB_ALIGN = 128
TOKEN_BLOCK: int | None = None  # overrides (tests, gradcheck); None: sized as above
VOCAB_BLOCK: int | None = None
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_sizes(N: int, V: int, token_block: int | None = None, vocab_block: int | None = None) -> tuple[int, int]:
    """(TN, TV): tokens and vocabulary rows per tile (arguments, then TOKEN_BLOCK / VOCAB_BLOCK, then the budget)."""
    tn = token_block or TOKEN_BLOCK
    if not tn:
        tn = _cdiv(max(N, 1), _cdiv(max(N, 1), MAX_TOKEN_TILE))
    tv = vocab_block or VOCAB_BLOCK
    if not tv:
        most = max(_VOCAB_ALIGN, LOGITS_TILE_BYTES // (4 * tn) // _VOCAB_ALIGN * _VOCAB_ALIGN)
        tv = min(most, _cdiv(_cdiv(V, _cdiv(V, most)), _VOCAB_ALIGN) * _VOCAB_ALIGN)
    return int(tn), int(tv)


def _mm_f32(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out (fp32) = a @ b without rounding the product to the inputs' dtype."""
    if a.dtype == torch.float32:
        torch.mm(a, b, out=out)
    elif a.is_cuda:
        torch.mm(a, b, out_dtype=torch.float32, out=out)
    else:  # CPU stand-in for aten::mm.dtype
        torch.mm(a.float(), b.float(), out=out)


def _addmm_f32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc (fp32) += a @ b without rounding the product to the inputs' dtype."""
    if a.dtype == torch.float32:
        acc.addmm_(a, b)
    elif a.is_cuda:
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc.addmm_(a.float(), b.float())


def _forward(hidden, weight, targets, inv_t, tn, tv):
    """(logp, lse, e, entropy): [N] fp32 each but e [N, H] fp32."""
    from posttrain.kernels import triton_fold  # imports Triton

    N, H = hidden.shape
    V = weight.shape[0]
    dt = torch.promote_types(hidden.dtype, weight.dtype)  # GEMM input dtype
    dev = hidden.device
    h = hidden.to(dt)
    e = torch.zeros(N, H, dtype=torch.float32, device=dev)
    state = torch.zeros(6, N, dtype=torch.float32, device=dev)  # m, s, se, xs, target logit, scale
    state[0] = float("-inf")
    size = min(N, tn) * min(V, tv)
    zbuf = torch.empty(size, dtype=torch.float32, device=dev)
    pbuf = zbuf if dt == torch.float32 else torch.empty(size, dtype=dt, device=dev)
    for t0 in range(0, N, tn):
        t1 = min(t0 + tn, N)
        e_blk, st = e[t0:t1], state[:, t0:t1]
        for v0 in range(0, V, tv):
            v1 = min(v0 + tv, V)
            w_blk = weight[v0:v1].to(dt)
            Z = zbuf[: (t1 - t0) * (v1 - v0)].view(t1 - t0, v1 - v0)
            P = pbuf[: (t1 - t0) * (v1 - v0)].view(t1 - t0, v1 - v0)
            _mm_f32(h[t0:t1], w_blk.t(), Z)
            triton_fold.fold_tile(Z, P, targets[t0:t1], v0, inv_t, st)
            e_blk.mul_(st[5].unsqueeze(1))
            _addmm_f32(e_blk, P, w_blk)
    m, s, se, xs, tgt, _ = state
    log_s = torch.log(s)
    lse = m + log_s
    e.div_(se.unsqueeze(1))
    entropy = (log_s - xs / s).clamp_(min=0.0)  # H = lse - E[z] = log s - sum p (z - m) / s
    return tgt - lse, lse, e, entropy


def _weight_grad(hidden, weight, targets, lse, coef, inv_t, tn, tv):
    """dW = sum_i coef_i (onehot(y_i) - p_i)^T h_i (coef = g / T), each logits tile recomputed once."""
    from posttrain.kernels import triton_fold

    N, H = hidden.shape
    V = weight.shape[0]
    dt = torch.promote_types(hidden.dtype, weight.dtype)
    dev = hidden.device
    h = hidden.to(dt)
    grad_w = torch.zeros(weight.shape, dtype=weight.dtype, device=dev)
    size = min(N, tn) * min(V, tv)
    zbuf = torch.empty(size, dtype=torch.float32, device=dev)
    gbuf = zbuf if dt == torch.float32 else torch.empty(size, dtype=dt, device=dev)
    acc = None if weight.dtype == torch.float32 else torch.empty(min(V, tv), H, dtype=torch.float32, device=dev)
    for v0 in range(0, V, tv):
        v1 = min(v0 + tv, V)
        w_blk = weight[v0:v1].to(dt)
        acc_blk = grad_w[v0:v1] if acc is None else acc[: v1 - v0].zero_()
        for t0 in range(0, N, tn):
            t1 = min(t0 + tn, N)
            Z = zbuf[: (t1 - t0) * (v1 - v0)].view(t1 - t0, v1 - v0)
            G = gbuf[: (t1 - t0) * (v1 - v0)].view(t1 - t0, v1 - v0)
            _mm_f32(h[t0:t1], w_blk.t(), Z)
            triton_fold.logits_grad_tile(Z, G, targets[t0:t1], v0, inv_t, lse[t0:t1], coef[t0:t1])
            _addmm_f32(acc_blk, G.t(), h[t0:t1])
        if acc is not None:
            grad_w[v0:v1].copy_(acc_blk)
    return grad_w


class DeviceFusedLogProb(torch.autograd.Function):
    """logp [N] = log_softmax(hidden @ weight.T / T)[targets] and the entropy [N] (no gradient) of that softmax."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, token_block, vocab_block):
        tiles = tile_sizes(hidden.shape[0], weight.shape[0], token_block, vocab_block)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes above are the inputs', never autocast's
            logp, lse, e, entropy = _forward(hidden, weight, targets, 1.0 / temperature, *tiles)
        ctx.mark_non_differentiable(entropy)
        ctx.save_for_backward(hidden, weight, targets, lse, e)
        ctx.temperature = temperature
        ctx.tiles = tiles
        ctx.consumed = False
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy=None):
        hidden, weight, targets, lse, e = ctx.saved_tensors
        if ctx.consumed:
            raise RuntimeError(
                "DeviceFusedLogProb.backward: the forward's buffer was already turned into the "
                "gradient; backward through it twice is not supported"
            )
        ctx.consumed = True
        inv_t = 1.0 / ctx.temperature
        coef = grad_logp.to(torch.float32) * inv_t
        tn, tv = ctx.tiles
        grad_h = grad_w = None
        with lm_head_gathered(weight), torch.autocast(hidden.device.type, enabled=False):
            if ctx.needs_input_grad[1]:
                grad_w = _weight_grad(hidden, weight, targets, lse, coef, inv_t, tn, tv)
            if ctx.needs_input_grad[0]:
                for t0 in range(0, hidden.shape[0], tn):  # in place over e: dh = g/T (W_y - e)
                    t1 = min(t0 + tn, hidden.shape[0])
                    e[t0:t1].sub_(weight.index_select(0, targets[t0:t1])).mul_(-coef[t0:t1].unsqueeze(1))
                grad_h = e.to(hidden.dtype)
        return grad_h, grad_w, None, None, None, None


def device_logps_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs [N] (fp32) and the detached entropy [N] of softmax(hidden @ weight.T / T), one pass.

    fp32, bf16 or fp16 inputs; on CPU only under TRITON_INTERPRET=1.
    """
    if hidden.dtype not in DTYPES or weight.dtype not in DTYPES:
        raise NotImplementedError(
            f"the device path of `fused` computes fp32/bf16/fp16 inputs, got {hidden.dtype} and {weight.dtype}"
        )
    return DeviceFusedLogProb.apply(hidden, weight, targets.contiguous(), float(temperature), token_block, vocab_block)


def device_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    token_block: int | None = None,
    vocab_block: int | None = None,
) -> torch.Tensor:
    """Per-token log-probs [N] (fp32) through `DeviceFusedLogProb` (the `triton` backend)."""
    return device_logps_entropy(hidden, weight, targets, temperature, token_block, vocab_block)[0]
