"""`--help` answers with the common commands, and exits 0 (Hydra's stock text and the bench's exit 2 before)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, run_cli


def test_train_help_lists_the_common_commands_and_groups():
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for needle in (
        "Common commands:",
        "mode=plan",
        "mode=export",
        "mode=sample",
        "resume=auto",
        "algo: contrastive, d2l, grpo",
    ):
        assert needle in proc.stdout, needle


def test_bench_help_exits_0():
    proc = subprocess.run([sys.executable, "-m", "posttrain.bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "grpo_loss|grpo_step|generation" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "posttrain.bench", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage:" in bad.stderr
