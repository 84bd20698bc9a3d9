"""Tune and time the CUDA loss kernel's fold (`posttrain.kernels.triton_fold`) on the GPU, in one process.

    python experiments/gpu/fold_sweep.py [--shapes 2048,2880,201088 ...] [--repeats 5]

1. Times `fold_tile` alone on the logits tiles the device path uses at the issue's shapes (2048 x 28800 and
   4096 x 16128 fp32 tiles, bf16 P) for each (ROWS, BLOCK, num_warps) of a small grid, with CUDA events
   (`triton.testing.do_bench`), and the bytes it moves per second (reads Z twice, writes P once).
2. Sets the fastest configuration (smallest summed time over the tiles) in `triton_fold`, then times the whole
   loss step (forward + backward w.r.t. hidden states, frozen head) of `fused` against the two-bf16-GEMM anchor
   and TRL's chunked loss at each shape, as `python -m posttrain.bench grpo_loss --device cuda` does (its
   `_inputs` / `_time_cuda`), TF32 on as the GPU profiles set it.

One JSON line per fold configuration and per (shape, backend). CUDA only.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

TILES = ((2048, 28800), (4096, 16128))
GRID = [*itertools.product((1, 2, 4), (1024, 2048, 4096), (4, 8)), (8, 512, 8), (8, 1024, 8)]


def time_fold(n: int, v: int) -> list[dict]:
    from triton.testing import do_bench

    from posttrain.kernels import triton_fold

    g = torch.Generator(device="cuda").manual_seed(0)
    Z = torch.randn(n, v, device="cuda", generator=g) * 3
    P = torch.empty(n, v, dtype=torch.bfloat16, device="cuda")
    targets = torch.randint(0, 201088, (n,), device="cuda", generator=g)
    out = []
    for rows, block, warps in GRID:
        triton_fold.ROWS, triton_fold.BLOCK, triton_fold.NUM_WARPS = rows, block, warps
        state = torch.zeros(6, n, device="cuda")
        state[0] = float("-inf")
        ms = do_bench(lambda st=state: triton_fold.fold_tile(Z, P, targets, 0, 1 / 0.7, st), warmup=5, rep=40)
        moved = n * v * (4 + 4 + 2)  # Z read twice (fp32), P written (bf16)
        out.append(
            {
                "tile": [n, v],
                "rows": rows,
                "block": block,
                "warps": warps,
                "ms": round(ms, 4),
                "tb_per_s": round(moved / ms / 1e9, 2),
            }
        )
        print(json.dumps({"fold": out[-1]}), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="*", default=["2048,2880,201088", "8192,2880,201088", "8192,4096,128256"])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_float32_matmul_precision("high")
    from posttrain.bench.grpo_loss import _inputs, _time_cuda
    from posttrain.kernels import triton_fold

    default = (triton_fold.ROWS, triton_fold.BLOCK, triton_fold.NUM_WARPS)
    total: dict[tuple, float] = {}
    for n, v in TILES:
        for r in time_fold(n, v):
            key = (r["rows"], r["block"], r["warps"])
            total[key] = total.get(key, 0.0) + r["ms"]
    best = min(total, key=total.get)
    print(
        json.dumps(
            {
                "best": best,
                "best_ms": round(total[best], 4),
                "default": default,
                "default_ms": round(total.get(default, float("nan")), 4),
            }
        ),
        flush=True,
    )
    triton_fold.ROWS, triton_fold.BLOCK, triton_fold.NUM_WARPS = best
    for shape in args.shapes:
        N, H, V = (int(x) for x in shape.split(","))
        inputs = _inputs(N, H, V, torch.bfloat16, 256, device="cuda")
        res = {}
        for backend in ("two_gemm", "fused", "chunked"):
            res[backend] = _time_cuda(backend, inputs, args.repeats)
            inputs[0].grad = None
        for backend, r in res.items():
            rec = {"shape": [N, H, V], "backend": backend, "config": best, "ms": round(r["seconds"] * 1e3, 3)}
            rec["median_ms"] = round(sorted(r["samples"])[len(r["samples"]) // 2] * 1e3, 3)
            rec["peak_mib"] = round(r["peak_mib"], 1)
            rec["ratio_vs_two_gemm"] = round(r["seconds"] / res["two_gemm"]["seconds"], 3)
            print(json.dumps(rec), flush=True)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
