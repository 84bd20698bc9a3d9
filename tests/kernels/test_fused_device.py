"""The device path of `fused` (`posttrain.kernels.fused_device`, the `triton` backend) against an fp64 reference.

Log-probs, entropy, hidden and weight gradients at shapes that span several token and vocabulary tiles with ragged
edges, temperature 0.7, targets in the first and last tiles and on a tile boundary, and rows whose maximum sits in
the last vocabulary tile ~200 above the first tile's (fp32 exp overflows unless the running sums are rescaled).
Triton reads TRITON_INTERPRET when it is first imported, so the kernel cases run in one fresh process (this file
run as a script). On CUDA: forward + backward under `torch.cuda.set_sync_debug_mode("error")`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

N, H, V, T = 37, 24, 1000, 0.7
TILES = (16, 192)  # 3 token tiles (16, 16, 5) x 6 vocabulary tiles (5 x 192, 40)
FAR_ROWS = (4, 5, 6, 7)  # their largest logit, in the last vocabulary tile, is 150 / T
_UNSPIED: dict = {}  # the launch functions of triton_fold before `_count_launches` wrapped them
TOL = {  # (log-prob: |error| / max(1, |logp|), entropy: |error|, gradients: max |error| / max |reference|)
    "fp32": (2e-5, 1e-5, 1e-5),
    "bf16": (2e-5, 1e-5, 5e-3),
    "mixed": (2e-5, 1e-5, 5e-3),  # fp32 hidden, bf16 weight: fp32 GEMMs, the weight gradient comes back in bf16
}


def _inputs(case: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h_dtype = torch.float32 if case in ("fp32", "mixed") else torch.bfloat16
    w_dtype = torch.float32 if case == "fp32" else torch.bfloat16
    hidden = torch.randn(N, H, generator=g).to(h_dtype)
    weight = (torch.randn(V, H, generator=g) * 3 / H**0.5).to(w_dtype)
    targets = torch.randint(0, V, (N,), generator=g)
    targets[:4] = torch.tensor([0, V - 1, TILES[1] - 1, TILES[1]])  # first / last tile, both sides of a boundary
    for i, r in enumerate(FAR_ROWS):  # weight row V-1-i has logit 150 with hidden row r: far above everything else
        weight[V - 1 - i] = (hidden[r].double() * 150 / hidden[r].double().square().sum()).to(w_dtype)
    targets[FAR_ROWS[-1]] = V - 1 - (len(FAR_ROWS) - 1)  # one far row samples its own maximum (logp ~ 0)
    upstream = torch.randn(N, generator=g)
    return hidden, weight, targets, upstream


def _reference(hidden, weight, targets, upstream):
    h, w = hidden.double().requires_grad_(), weight.double().requires_grad_()
    logp_all = torch.log_softmax(h @ w.t() / T, -1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    dh, dw = torch.autograd.grad((logp * upstream.double()).sum(), [h, w])
    return logp.detach(), entropy.detach(), dh, dw


def _count_launches() -> dict:
    """From now on, count the Triton launches of `fused_device` (fold: forward, grad: weight backward)."""
    from posttrain.kernels import triton_fold

    launches = {"fold": 0, "grad": 0}

    def count(name, fn):
        def spy(*args, **kwargs):
            launches[name] += 1
            return fn(*args, **kwargs)

        return spy

    for name, attr in (("fold", "fold_tile"), ("grad", "logits_grad_tile")):
        real = _UNSPIED.setdefault(attr, getattr(triton_fold, attr))
        setattr(triton_fold, attr, count(name, real))
    return launches


def _case(case: str) -> dict:
    """Kernel vs reference errors for one input case, and the number of kernel launches per forward/backward."""
    from posttrain.kernels import fused_device

    launches = _count_launches()
    hidden, weight, targets, upstream = _inputs(case)
    if case == "fp32":  # a transposed head (tied to an embedding stored [H, V]) and a strided hidden state
        weight, hidden = weight.t().contiguous().t(), hidden.t().contiguous().t()
    ref_logp, ref_entropy, ref_dh, ref_dw = _reference(hidden, weight, targets, upstream)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logp, entropy = fused_device.device_logps_entropy(h, w, targets, T, *TILES)
    dh, dw = torch.autograd.grad((logp * upstream).sum(), [h, w])
    rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
    far = list(FAR_ROWS)
    return {
        "case": case,
        "logp": ((logp.double() - ref_logp).abs() / ref_logp.abs().clamp(min=1)).max().item(),
        "entropy": (entropy.double() - ref_entropy).abs().max().item(),
        "dh": rel(dh, ref_dh),
        "dw": rel(dw, ref_dw),
        "far_logp_ref": ref_logp[far].tolist(),
        "far_logp_err": (logp.double() - ref_logp)[far].abs().max().item(),
        "dtypes": [str(logp.dtype), str(dh.dtype), str(dw.dtype)],
        "launches": launches,
    }


def _empty_and_dispatch() -> dict:
    """No tokens; and `fused_logps_entropy` taking the device path when `_on_device_path` says so (CUDA)."""
    from posttrain.kernels import fused, fused_device

    h = torch.randn(0, H, requires_grad=True)
    logp, entropy = fused_device.device_logps_entropy(h, torch.randn(V, H), torch.zeros(0, dtype=torch.long))
    (dh,) = torch.autograd.grad(logp.sum(), [h])
    hidden, weight, targets, _ = _inputs("bf16")
    fused._on_device_path = lambda hidden, weight: True
    fused_device.TOKEN_BLOCK, fused_device.VOCAB_BLOCK = TILES
    launches = _count_launches()
    via_fused = fused.fused_logps_entropy(hidden, weight, targets, T)
    direct = fused_device.device_logps_entropy(hidden, weight, targets, T)
    return {
        "case": "empty_dispatch",
        "empty_shapes": [list(logp.shape), list(entropy.shape), list(dh.shape)],
        "dispatch_equal": all(torch.equal(a, b) for a, b in zip(via_fused, direct)),
        "dispatch_launches": launches["fold"],
    }


@pytest.fixture(scope="module")
def interpreted() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in rows}


@pytest.mark.parametrize("case", list(TOL))
def test_matches_fp64_reference(interpreted, case):
    r = interpreted[case]
    logp_tol, entropy_tol, grad_tol = TOL[case]
    assert r["logp"] < logp_tol and r["entropy"] < entropy_tol, r
    assert r["dh"] < grad_tol and r["dw"] < grad_tol, r
    weight_dtype = "torch.float32" if case == "fp32" else "torch.bfloat16"
    hidden_dtype = "torch.bfloat16" if case == "bf16" else "torch.float32"
    assert r["dtypes"] == ["torch.float32", hidden_dtype, weight_dtype]


@pytest.mark.parametrize("case", list(TOL))
def test_online_max_rescale(interpreted, case):
    """The far rows' log-probs are ~ -200 (and ~0 for the row that samples its maximum): exact to fp32 rounding."""
    r = interpreted[case]
    assert max(r["far_logp_ref"][:-1]) < -150 and abs(r["far_logp_ref"][-1]) < 1e-3
    assert r["far_logp_err"] < 2e-5 * 250


@pytest.mark.parametrize("case", list(TOL))
def test_one_fold_and_one_grad_launch_per_tile(interpreted, case):
    assert interpreted[case]["launches"] == {"fold": 3 * 6, "grad": 3 * 6}


def test_no_tokens_and_fused_dispatch(interpreted):
    r = interpreted["empty_dispatch"]
    assert r["empty_shapes"] == [[0], [0], [0, H]]
    assert r["dispatch_equal"] and r["dispatch_launches"] == 2 * 3 * 6  # fused_logps_entropy, then the direct call


def test_tile_sizes_fit_the_logits_budget():
    from posttrain.kernels import fused_device as fd

    assert fd.tile_sizes(2048, 201088) == (2048, 28800)
    assert fd.tile_sizes(8192, 128256) == (4096, 16128)
    for n, v in [(2048, 201088), (8192, 201088), (8192, 128256), (5000, 201088), (100, 201088), (1, 50)]:
        tn, tv = fd.tile_sizes(n, v)
        assert tn <= fd.MAX_TOKEN_TILE and tn * tv * 4 <= fd.LOGITS_TILE_BYTES and tv % 128 == 0
        last_t, last_v = n - (-(-n // tn) - 1) * tn, v - (-(-v // tv) - 1) * tv
        assert last_t >= tn // 2 and last_v >= min(tv, v) // 2  # balanced: no sliver of a tile at the end
    assert fd.tile_sizes(100, 1000, 16, 192) == (16, 192)
    fd.VOCAB_BLOCK = 64
    try:
        assert fd.tile_sizes(100, 1000) == (100, 64)
    finally:
        fd.VOCAB_BLOCK = None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the no-sync check runs on the GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cuda_forward_backward_never_sync(dtype):
    """Forward + backward (hidden and weight gradients) of `fused` on CUDA with several tiles, under
    `set_sync_debug_mode("error")`: any host synchronisation raises. Then the numbers against fp64."""
    from posttrain.kernels import fused, fused_device

    g = torch.Generator(device="cuda").manual_seed(0)
    n, h_dim, v = 3000, 256, 50_000
    hidden = torch.randn(n, h_dim, device="cuda", generator=g).to(dtype).requires_grad_()
    weight = (torch.randn(v, h_dim, device="cuda", generator=g) * 3 / h_dim**0.5).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), device="cuda", generator=g)
    upstream = torch.randn(n, device="cuda", generator=g)
    old = fused_device.TOKEN_BLOCK, fused_device.VOCAB_BLOCK, torch.get_float32_matmul_precision()
    fused_device.TOKEN_BLOCK, fused_device.VOCAB_BLOCK = 1024, 8192  # 3 x 7 tiles
    torch.set_float32_matmul_precision("highest")  # fp32: no TF32, so the fp32 gate can be tight
    try:
        torch.autograd.grad(fused.fused_logps(hidden, weight, targets, T).sum(), [hidden, weight])  # compile
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            logp, entropy = fused.fused_logps_entropy(hidden, weight, targets, T)
            dh, dw = torch.autograd.grad((logp * upstream).sum(), [hidden, weight])
        finally:
            torch.cuda.set_sync_debug_mode(0)
    finally:
        fused_device.TOKEN_BLOCK, fused_device.VOCAB_BLOCK = old[:2]
        torch.set_float32_matmul_precision(old[2])
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    logp_all = torch.log_softmax(h64 @ w64.t() / T, -1)
    ref = logp_all.gather(1, targets[:, None]).squeeze(1)
    ref_dh, ref_dw = torch.autograd.grad((ref * upstream.double()).sum(), [h64, w64])
    grad_tol = 5e-3 if dtype == torch.bfloat16 else 1e-4
    assert ((logp.double() - ref).abs() / ref.abs().clamp(min=1)).max() < 2e-5
    assert (entropy.double() + (logp_all.exp() * logp_all).sum(-1)).abs().max() < 1e-4
    assert (dh.double() - ref_dh).abs().max() / ref_dh.abs().max() < grad_tol
    assert (dw.double() - ref_dw).abs().max() / ref_dw.abs().max() < grad_tol


if __name__ == "__main__":  # the interpreted cases, in a process that imports Triton with TRITON_INTERPRET=1
    for name in TOL:
        print(json.dumps(_case(name)), flush=True)
    print(json.dumps(_empty_and_dispatch()), flush=True)
