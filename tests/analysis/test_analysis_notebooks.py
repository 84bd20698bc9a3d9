"""The notebooks execute headless (nbclient) against the session's 2x2 sweep and write their PNGs."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow


def _execute(name: str, cwd: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel", reason="needs ipykernel for the python3 kernel")
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()


def _assert_pngs(folder: Path, names: list[str]) -> None:
    for name in names:
        path = folder / name
        assert path.is_file(), f"{name} not written (have: {sorted(p.name for p in folder.iterdir())})"
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name


def test_sweep_analysis_notebook(sweep_2x2, tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_RUNS", str(sweep_2x2))
    monkeypatch.setenv("POSTTRAIN_FIGURES", str(tmp_path / "fig"))
    _execute("sweep_analysis.ipynb", tmp_path)
    _assert_pngs(tmp_path / "fig", ["sweep_reward_kl.png", "sweep_objective.png", "sweep_other_metrics.png"])
    table = pd.read_csv(tmp_path / "fig" / "sweep_summary.csv")
    assert len(table) == 4 and sorted(table["algo.trl.beta"].unique()) == [0.0, 0.04]
    assert table["objective"].between(0, 1).all()


def test_kernels_memory_notebook(sweep_2x2, tmp_path, monkeypatch):
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    expect = ["memory_by_kernel.png", "memory_by_hw.png", "kernel_runs.png"]
    if importlib.util.find_spec("posttrain.bench.grpo_loss"):  # a real (tiny) benchmark for the bench section
        from posttrain.bench.grpo_loss import main as bench_grpo_loss

        out = io.StringIO()
        monkeypatch.chdir(tmp_path)
        with contextlib.redirect_stdout(out):
            code = bench_grpo_loss(["--shape", "128,32,256", "--backends", "eager", "--rounds", "1"])
        assert code == 0
        (bench_dir / "results.jsonl").write_text(out.getvalue())
        expect.append("kernel_bench.png")
    for key, value in {
        "POSTTRAIN_MODEL": "llama3_2_1b",
        "POSTTRAIN_HW": "rtx4090",
        "POSTTRAIN_BENCH": str(bench_dir),
        "POSTTRAIN_RUNS": str(sweep_2x2),
        "POSTTRAIN_FIGURES": str(tmp_path / "fig"),
    }.items():
        monkeypatch.setenv(key, value)
    _execute("kernels_memory.ipynb", tmp_path)
    _assert_pngs(tmp_path / "fig", expect)
    plan = pd.read_csv(tmp_path / "fig" / "kernels_memory_plan.csv").set_index("kernels")
    assert set(plan.index) == {"trl", "chunked", "fused"}
    # TRL's loss materializes [tokens, vocab] logits; the fused kernel does not
    assert plan.loc["trl", "logits_gib"] > plan.loc["fused", "logits_gib"]
    assert plan.loc["trl", "peak_gib"] > plan.loc["fused", "peak_gib"]
