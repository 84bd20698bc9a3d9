"""The shell drivers of experiments/: every script parses, and `experiments/run_one.sh` (shared by them) runs
train.py's command line, keeps the listed files and records cost, or says which run failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(ROOT.glob("experiments/**/*.sh"))
pytestmark = pytest.mark.skipif(not Path("/usr/bin/time").is_file(), reason="needs GNU time at /usr/bin/time")

FAKE_TRAIN = """#!/usr/bin/env bash
# stands in for `python`: $1 is train.py, the rest its overrides; writes into hydra.run.dir like a run would
shift
for a in "$@"; do case $a in hydra.run.dir=*) dir=${a#hydra.run.dir=};; esac; done
echo "$*" > "$dir/summary.json"; echo big > "$dir/checkpoint.bin"
[ "$FAIL" = 1 ] && exit 3
exit 0
"""


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_parses(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def _run_one(tmp_path: Path, fail: bool) -> subprocess.CompletedProcess:
    fake = tmp_path / "py"
    fake.write_text(FAKE_TRAIN)
    fake.chmod(0o755)
    cmd = f'source {ROOT}/experiments/run_one.sh && run_one demo "seed=3 algo.x=1"'
    env = {
        "PATH": "/usr/bin:/bin",
        "PY": str(fake),
        "OUT": str(tmp_path / "runs"),
        "RES": str(tmp_path / "res"),
        "KEEP": "summary.json eval.json",
        "FAIL": "1" if fail else "0",
    }
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_run_one_keeps_the_listed_files_and_the_cost(tmp_path):
    proc = _run_one(tmp_path, fail=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("demo done: ") and "Elapsed" in proc.stdout
    kept = tmp_path / "res" / "demo"
    assert sorted(p.name for p in kept.iterdir()) == ["loadavg.txt", "summary.json", "time_v.txt"]
    assert (kept / "summary.json").read_text().split() == [
        "seed=3",
        "algo.x=1",
        f"hydra.run.dir={tmp_path / 'runs' / 'demo'}",
    ]
    assert "Maximum resident set size" in (kept / "time_v.txt").read_text()
    assert (tmp_path / "runs" / "demo" / "checkpoint.bin").is_file()  # the big files stay in the runs folder


def test_run_one_names_the_failed_run(tmp_path):
    proc = _run_one(tmp_path, fail=True)
    assert proc.returncode == 1
    assert f"demo failed: see {tmp_path / 'runs' / 'demo'}/stdout.log" in proc.stdout
    assert not (tmp_path / "res" / "demo" / "summary.json").exists()


def test_run_listed_stops_at_an_unknown_name_with_the_known_ones(tmp_path):
    cmd = (
        f"source {ROOT}/experiments/run_one.sh; declare -A RUNS=([a]=x); ORDER=(a); "
        "run_one() { echo ran $1; }; run_listed a nope"
    )
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == ["ran a", "unknown run nope (one of: a)"]
