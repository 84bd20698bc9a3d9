"""Gradcheck gates for every backend available on CPU, across the option matrix, plus the CLI itself.

The matrix runs `posttrain.kernels.gradcheck.run` in-process (one import of JAX/Triton for all cases);
a few cases go through the real `python -m posttrain.kernels.gradcheck` command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from posttrain.kernels import BACKENDS, available
from posttrain.kernels import gradcheck as gc

CASE_IDS = [f"t{c['temperature']}-dw{int(c['weight_grad'])}-rows{c['empty_rows']}" for c in gc.MATRIX]


@pytest.fixture(autouse=True)
def _triton_interpret(monkeypatch):
    # Triton kernels are built lazily, so the variable only has to be set before the first launch
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _backend_or_skip(backend):
    os.environ["TRITON_INTERPRET"] = "1"
    ok, why = available(backend)
    if not ok:
        pytest.skip(f"{backend}: {why}")


def _run(**overrides):
    cfg = dict(gc.DEFAULTS)
    cfg.update(overrides)
    return gc.run(cfg)


@pytest.fixture(scope="module")
def triton_matrix():
    """Triton reads TRITON_INTERPRET when `triton` is first imported (TRL imports it early in a test
    session), so the Triton cases run in one fresh process with the variable set from the start."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "posttrain.kernels.gradcheck",
            "--matrix",
            "kernels=triton",
            "token_block=32",
            "vocab_block=128",
            "empty_rows=1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, rows, proc.stderr


@pytest.mark.parametrize("case", gc.MATRIX, ids=CASE_IDS)  # one subprocess runs them all: every row is checked
def test_gradcheck_matrix_triton_interpret(triton_matrix, case):
    code, rows, err = triton_matrix
    if any(r.get("unavailable") for r in rows):
        pytest.skip(rows[0]["unavailable"])
    (row,) = [r for r in rows if all(r[k] == v for k, v in case.items())] or [None]
    assert row is not None, err[-2000:]
    assert row["exit"] == 0, row.get("failures")
    assert row["rel_diff_loss"] < 2e-5 and row["max_rel_diff_dhidden"] < 1e-4 and row["entropy_checked"]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "triton"])
@pytest.mark.parametrize("case", gc.MATRIX, ids=CASE_IDS)
def test_gradcheck_matrix(backend, case):
    """Log-probs, entropies (where the backend has them, with their gradient where it has that) and the VJP of a
    random cotangent against fp64 eager; tiles of 32 tokens x 128 vocab (3 vocab tiles)."""
    _backend_or_skip(backend)
    code, out = _run(kernels=backend, token_block=32, vocab_block=128, **case)
    assert code == 0, out.get("failures")
    assert out["rel_diff_loss"] < 2e-5 and out["max_rel_diff_dhidden"] < 1e-4 and out["max_abs_diff_logp"] < 1e-5
    row = BACKENDS[backend]
    assert out["entropy_checked"] == (row.entropy_function is not None)
    assert out["entropy_grad_checked"] == row.entropy_grad
    if out["entropy_checked"]:
        assert out["max_abs_diff_entropy"] < 5e-5  # nats; fp32 against fp64
    if case["weight_grad"]:
        assert out["max_rel_diff_dweight"] < 1e-4


@pytest.mark.parametrize("backend", ["fused", "pallas"])
def test_large_logits_rebase_the_lazy_max(backend):
    """logit std 60 over many small tiles: the running reference max must move (fp32 exp would overflow)."""
    _backend_or_skip(backend)
    code, out = _run(kernels=backend, logit_std=60.0, weight_grad=True)
    assert code == 0, out.get("failures")


@pytest.mark.parametrize("backend,loss_tol", [("eager", 1e-5), ("fused", 5e-5), ("pallas", 1e-5)])
def test_bf16_inputs_keep_fp32_softmax(backend, loss_tol):
    """bf16 hidden/weight with fp32 logits and softmax: the loss is off by far less than rounding the logits to
    bf16 costs (TRL's chunked head and Liger on CPU: ~2e-2). eager and pallas upcast, so only the bf16 gradient
    output rounding remains; fused runs bf16 GEMMs in ATen's flash kernel, whose reduced-precision path
    carries a ~5e-5 log-sum-exp error (test_fused_bf16_gemms_vs_upcast)."""
    _backend_or_skip(backend)
    code, out = _run(kernels=backend, dtype="bf16", weight_grad=True)
    assert code == 0, out.get("failures")
    assert out["rel_diff_loss"] < loss_tol


@pytest.fixture
def flash_calls(monkeypatch):
    """Counts the calls into ATen's CPU flash-attention kernel made by `fused` (the test fails if it is not used)."""
    from posttrain.kernels import fused

    calls = []

    def spy(*args, **kwargs):
        calls.append(args[1].shape[2])  # vocabulary rows in this call
        return real(*args, **kwargs)

    real = fused._flash
    monkeypatch.setattr(fused, "_flash", spy)
    return calls


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_fused_flash_path_chunks_blocks_and_packs(flash_calls, dtype):
    """CPU flash path past the tiny gradcheck size: 128 tokens (the kernel packs bf16 keys/values from 64 rows
    on), V = 3000 in three chunks merged by log-sum-exp, each chunk several 512-row kernel blocks, logits of
    std 60 (the kernel's running max moves), weight gradient and temperature."""
    code, out = _run(
        kernels="fused",
        dtype=dtype,
        B=4,
        T=32,
        H=64,
        V=3000,
        vocab_block=1024,
        logit_std=60.0,
        temperature=0.7,
        weight_grad=True,
        empty_rows="1",
    )
    assert flash_calls == [1024, 1024, 952]
    assert code == 0, out.get("failures")
    assert out["max_rel_diff_dhidden"] < (1e-2 if dtype == "bf16" else 1e-4)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"logit_std": 60.0, "weight_grad": True},
        {"temperature": 0.7, "weight_grad": True},
    ],
    ids=["default", "std60-dw", "t0.7-dw"],
)
def test_fused_tile_loop(monkeypatch, flash_calls, dtype, extra):
    """The torch tile loop (fp64, devices without the flash kernel, the Triton fold's host loop) on fp32/bf16."""
    from posttrain.kernels import fused

    monkeypatch.setattr(fused, "CPU_FLASH", False)
    code, out = _run(kernels="fused", dtype=dtype, **extra)
    assert flash_calls == []
    assert code == 0, out.get("failures")
    if dtype == "bf16":
        assert out["rel_diff_loss"] < 1e-5


def test_fused_bf16_gemms_vs_upcast(monkeypatch, flash_calls):
    """What the bf16-GEMM choice costs in accuracy: with fp32 GEMMs on upcast chunks the loss is fp32-exact
    (< 2e-6); with bf16 GEMMs (the default, 2-5x faster, experiments/kernels/LOG.md) it is off by ~1e-5,
    inside the bf16 gate (1e-4) and ~1000x below what bf16 logits cost."""
    from posttrain.kernels import fused

    cfg = dict(kernels="fused", dtype="bf16", B=4, T=32, H=64, V=3000, vocab_block=1024)
    code, native = _run(**cfg)
    assert code == 0 and native["rel_diff_loss"] < 5e-5
    monkeypatch.setattr(fused, "BF16_NATIVE", False)
    code, upcast = _run(**cfg)
    assert code == 0 and upcast["rel_diff_loss"] < 2e-6
    assert len(flash_calls) == 6


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_fp64_is_exact(backend):
    code, out = _run(kernels=backend, dtype="fp64", weight_grad=True)
    assert code == 0, out.get("failures")
    assert out["rel_diff_loss"] < 1e-12 and out["max_rel_diff_dhidden"] < 1e-12


def _cli(*args, env_extra=None):
    env = {**os.environ, "TRITON_INTERPRET": "1", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "posttrain.kernels.gradcheck", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_cli_prints_metrics_and_passes():
    proc = _cli("kernels=fused", "temperature=0.7", "weight_grad=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in (
        "loss_ref",
        "loss_kernel",
        "abs_diff_loss",
        "max_abs_diff_logp",
        "max_abs_diff_entropy",
        "max_abs_diff_dhidden",
        "max_rel_diff_dhidden",
        "max_abs_diff_dweight",
        "max_rel_diff_dweight",
    ):
        assert f"{key}: " in proc.stdout
    assert "PASS" in proc.stdout
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["exit"] == 0 and summary["config"]["temperature"] == 0.7


@pytest.mark.parametrize(
    "extra",
    [
        ["weight_grad=true", "temperature=0.7", "empty_rows=0,2"],
        ["logit_std=60", "weight_grad=true"],
        ["dtype=bf16", "weight_grad=true"],
    ],
)
def test_triton_interpret_cli(extra):
    """Triton (TRITON_INTERPRET=1, fresh process): weight grad, temperature, lazy-max re-basing, bf16."""
    proc = _cli("kernels=triton", *extra)
    if "UNAVAILABLE" in proc.stdout:
        pytest.skip(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cli_fails_a_gate_with_nonzero_exit():
    """TRL's chunked kernel computes in fp32, so it cannot meet the fp64 gate: exit 1 and the reason."""
    proc = _cli("kernels=chunked", "dtype=fp64")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "rel_diff_loss" in proc.stdout


def test_cli_bad_args():
    proc = _cli("kernels=fused", "nonsense=3")
    assert proc.returncode == 4 and "nonsense" in proc.stderr


def test_available_reports_reasons(monkeypatch):
    assert available("fused") == (True, "")
    ok, why = available("nope")
    assert not ok and "unknown backend" in why
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    import torch

    if not torch.cuda.is_available():
        ok, why = available("triton")
        assert not ok and "TRITON_INTERPRET" in why


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_non_contiguous_inputs(dtype):
    """A transposed LM head (e.g. tied to an embedding stored [H, V]) and a strided hidden state: ATen's flash
    kernel reads rows as contiguous, so `fused` must hand it contiguous chunks (it once returned garbage)."""
    from posttrain.kernels.eager import eager_logps
    from posttrain.kernels.fused import fused_logps

    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(32, 700, generator=g) * 0.5).to(dtype).t()
    hidden = torch.randn(32, 80, generator=g).to(dtype).t()
    targets = torch.randint(0, 700, (80,), generator=g)
    assert not weight.is_contiguous() and not hidden.is_contiguous()
    got = fused_logps(hidden, weight, targets, temperature=0.7)
    ref = eager_logps(hidden.double().contiguous(), weight.double().contiguous(), targets, 0.7)
    assert (got.double() - ref).abs().max() < (1e-4 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_no_tokens(dtype):
    """Zero tokens (e.g. an empty completion batch reaching the kernel): empty log-probs and gradient. ATen's flash
    kernel divides by the token count (SIGFPE), so `fused` must not call it then."""
    from posttrain.kernels.fused import fused_logps

    hidden = torch.randn(0, 16, dtype=dtype, requires_grad=True)
    out = fused_logps(hidden, torch.randn(300, 16, dtype=dtype), torch.zeros(0, dtype=torch.long))
    out.sum().backward()
    assert out.shape == (0,) and hidden.grad.shape == (0, 16)


def test_a_case_leaves_the_tile_sizes_as_it_found_them():
    """`run` sets the kernels' module-level tile sizes for its case; left set, they changed every later in-process
    caller (test_training_steps saw the fused trajectory drift by 2e-4 after the matrix ran)."""
    from posttrain.kernels import fused

    before = (fused.TOKEN_BLOCK, fused.VOCAB_BLOCK, fused.FLASH_CHUNK)
    code, out = _run(kernels="fused", token_block=3, vocab_block=7)
    assert code == 0, out["failures"]
    assert before == (fused.TOKEN_BLOCK, fused.VOCAB_BLOCK, fused.FLASH_CHUNK)
