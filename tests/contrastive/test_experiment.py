"""experiments/contrastive_smollm2 end to end at tiny scale: run.sh's commands on model=tiny_llama, then report.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import experiment_script, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_run_script_and_report_at_tiny_scale(tmp_path):
    env = {**os.environ, "SCALE": "tiny", "SEEDS": "0", "OUT": str(tmp_path), "PY": sys.executable}
    script = ROOT / "experiments" / "contrastive_smollm2" / "run.sh"
    runs = ("base", "sft_s0", "sft_inv_s0", "dpo_inv_s0")
    proc = subprocess.run(["bash", str(script), *runs], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = tmp_path / "results"
    # the detection arm trains like sft_inv with other algo options (tests/contrastive/test_invariance): its command
    # is checked by the plan (composition, validation), its rows by the report on sft_inv_s0's files
    dry = subprocess.run(
        ["bash", str(script), "detection_s0"], cwd=ROOT, env={**env, "DRY_RUN": "1"}, capture_output=True, text=True
    )
    name, *args = dry.stdout.split()
    assert name == "detection_s0" and "algo.objective=detection" in args
    plan = run_cli(*args, "mode=plan", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    shutil.copytree(res / "sft_inv_s0", res / "detection_s0")
    for name in runs:
        records = res / name / ("eval_init.jsonl" if name == "base" else "eval_after.jsonl")
        assert len(records.read_text().splitlines()) == 15  # 1 task instance x 5 families x 3 positions
    experiment_script(script.parent / "report.py").main(["--results", str(res)])
    text = (res / "report.md").read_text()
    assert "| sft_inv_s0 − sft_s0 |" in text and "| dpo_inv_s0 − base |" in text
    # the seed-pooled tables: one row per arm (seeds counted) and per pair
    assert "| sft_inv | 1 | " in text and "| sft_inv − sft | 1 | " in text and "| dpo_inv − base | 1 | " in text
    assert "| detection_s0 | " in text and (res / "asr_by_family.png").stat().st_size > 0
