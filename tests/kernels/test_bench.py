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
