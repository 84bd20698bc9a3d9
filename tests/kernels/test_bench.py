"""`python -m posttrain.bench grpo_loss` runs each backend in its own process and reports ratios and memory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _bench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "posttrain.bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_bench_grpo_loss_small_shape():
    proc = _bench("grpo_loss", "--shape", "512,64,32768", "--backends", "eager,fused,fused@tiles", "--rounds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = {r["backend"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    assert set(recs) == {"two_gemm", "eager", "fused", "fused@tiles"}
    for r in recs.values():
        assert r["seconds"] > 0 and {"peak_mib", "ratio_vs_eager", "ratio_vs_two_gemm"} <= r.keys()
        assert len(r["loadavg"]) == 1 and r["loadavg"][0] >= 0
    assert recs["two_gemm"]["ratio_vs_two_gemm"] == 1.0 and recs["eager"]["ratio_vs_eager"] == 1.0
    # eager holds [512, 32768] fp32 logits (64 MiB) several times over; fused one 512x4096 tile at most
    assert recs["eager"]["peak_mib"] > 128
    assert recs["fused"]["peak_mib"] < recs["eager"]["peak_mib"] / 4


def test_bench_usage_errors():
    proc = _bench("nope", timeout=120)
    assert proc.returncode == 2 and "grpo_loss" in proc.stderr
    proc = _bench("grpo_loss", "--shape", "8,8,64", "--backends", "fused@nope,eager@tiles", timeout=120)
    assert proc.returncode == 2 and "fused@nope" in proc.stderr and "eager@tiles" in proc.stderr


def test_fused_variants_switch_the_fused_module():
    """`fused@tiles` / `fused@upcast` name existing switches of posttrain.kernels.fused (a rename would
    otherwise only show up as a silently unchanged benchmark)."""
    from posttrain.bench.grpo_loss import FUSED_VARIANTS
    from posttrain.kernels import fused

    assert set(FUSED_VARIANTS) == {"tiles", "upcast"}
    for switches in FUSED_VARIANTS.values():
        for name, value in switches.items():
            assert hasattr(fused, name) and type(getattr(fused, name)) is type(value) and getattr(fused, name) != value


def test_bench_device_flag_and_a_tiny_cpu_run():
    """`--help` lists `--device` (and `--tf32`, `--repeats`); `--device cpu` prints one JSON line per backend with the
    ratio to the two-GEMM anchor run in the same invocation."""
    proc = _bench("grpo_loss", "--help", timeout=120)
    assert proc.returncode == 0 and all(f in proc.stdout for f in ("--device", "--tf32", "--repeats"))
    proc = _bench(
        "grpo_loss", "--shape", "256,64,8192", "--backends", "fused", "--rounds", "1", "--device", "cpu", "--threads=1"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = {r["backend"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    assert set(recs) == {"two_gemm", "fused"}
    assert all(r["device"] == "cpu" and r["tf32"] is None and r["seconds"] > 0 for r in recs.values())
    assert recs["two_gemm"]["ratio_vs_two_gemm"] == 1.0
    # the ratio of the two times (each printed to the millisecond, so the ratio of the printed ones is only that close)
    fused, anchor = recs["fused"]["seconds"], recs["two_gemm"]["seconds"]
    slack = 5e-4 / anchor + fused * 5e-4 / anchor**2 + 1e-3
    assert abs(recs["fused"]["ratio_vs_two_gemm"] - fused / anchor) <= slack
    assert "median_seconds" not in recs["fused"]  # a CUDA-only field


def test_bench_cuda_without_a_gpu_is_one_usage_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = _bench("grpo_loss", "--shape", "8,8,64", "--device", "cuda", timeout=120)
    assert proc.returncode == 2 and "--device cuda" in proc.stderr and not proc.stdout


def test_cuda_rounds_report_min_and_median_of_all_repeats():
    """How `--device cuda` combines its processes' CUDA-event timings (the GPU itself is not needed for this part)."""
    from posttrain.bench.grpo_loss import _best_of

    runs = [
        {"seconds": 0.0071, "samples": [0.0075, 0.0071, 0.0090], "peak_mib": 300.0, "max_allocated_mib": 9000.0},
        {"seconds": 0.0069, "samples": [0.0069, 0.0072, 0.0073], "peak_mib": 310.0, "max_allocated_mib": 9010.0},
    ]
    for r in runs:
        r["loadavg"] = 0.5
    best = _best_of(runs, 6)
    assert best["seconds"] == 0.0069 and best["times"] == [0.0071, 0.0069]
    assert best["median_seconds"] == 0.00725 and best["peak_mib"] == 310.0 and best["max_allocated_mib"] == 9010.0
    assert "median_seconds" not in _best_of([{"seconds": 1.0, "peak_mib": 1.0, "loadavg": 0.0}], 3)
