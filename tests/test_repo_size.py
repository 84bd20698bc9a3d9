"""What git tracks stays small (issue 58): no file over MAX_FILE_KB but the allow-listed fixtures, experiments/ at
most 5 MB, the whole tree at most 10 MB. Results are compact tables; run dirs, logs and checkpoints are ignored."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_KB = 350  # .pre-commit-config.yaml's check-added-large-files uses the same limit
ALLOWED = {"tests/rewards/fixtures/ifeval_reference.json"}  # IFEval's reference verdicts, checked against ours
pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)


def _tracked() -> dict[str, int]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    sizes = {}
    for name in names.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():  # a file deleted in the working tree but not yet in git: not counted
            sizes[name] = path.stat().st_size
    return sizes


def test_tracked_files_and_folders_within_budget():
    sizes = _tracked()
    big = {n: s // 1024 for n, s in sizes.items() if s > MAX_FILE_KB * 1024 and n not in ALLOWED}
    assert not big, f"tracked files over {MAX_FILE_KB} KB: {big}"
    experiments = sum(s for n, s in sizes.items() if n.startswith("experiments/"))
    assert experiments <= 5 * 2**20, experiments
    assert sum(sizes.values()) <= 10 * 2**20


def test_precommit_checks_the_same_limit():
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "check-added-large-files" in config and f"--maxkb={MAX_FILE_KB}" in config
    assert all(name.replace(".", r"\.") in config for name in ALLOWED)
