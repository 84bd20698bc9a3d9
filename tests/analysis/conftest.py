"""A 2x2 GRPO multirun on the tiny model, made once per test run and shared by the analysis and notebook tests (by
every pytest-xdist worker too)."""

from __future__ import annotations

import os

import pytest
from filelock import FileLock

from tests.conftest import run_cli

SWEEP_OVERRIDES = (
    "-m",
    "algo.trl.beta=0.0,0.04",
    "seed=1,2",
    "trainer.max_steps=3",
    "algo.trl.num_generations=2",
    "trainer.per_device_batch_size=4",
    "trainer.progress_bar=false",
)
MAX_STEPS = 3


@pytest.fixture(scope="session")
def sweep_2x2(tmp_path_factory):
    """`python train.py -m algo.trl.beta=0.0,0.04 seed=1,2 ...` run from a scratch dir (in this interpreter: Hydra's
    basic launcher runs the 4 jobs in turn); returns the sweep directory."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' temp dirs share this parent: one sweep for all
        root = root.parent
    work = root / "sweep_2x2"
    sweep_dir = work / "multirun"
    with FileLock(str(root / "sweep_2x2.lock")):
        if not (work / "DONE").is_file():
            work.mkdir(exist_ok=True)
            proc = run_cli(*SWEEP_OVERRIDES, f"hydra.sweep.dir={sweep_dir}", cwd=work)
            assert proc.returncode == 0, proc.stderr[-3000:]
            (work / "DONE").write_text("")
    return sweep_dir
