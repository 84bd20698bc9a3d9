"""A 2x2 GRPO multirun on the tiny model, made once per session and shared by the analysis and notebook tests."""

from __future__ import annotations

import pytest

from tests.conftest import run_train

SWEEP_OVERRIDES = (
    "-m",
    "algo.beta=0.0,0.04",
    "seed=1,2",
    "trainer.max_steps=3",
    "algo.num_generations=2",
    "trainer.per_device_batch_size=4",
    "trainer.progress_bar=false",
)
MAX_STEPS = 3


@pytest.fixture(scope="session")
def sweep_2x2(tmp_path_factory):
    """`python train.py -m algo.beta=0.0,0.04 seed=1,2 ...` in a scratch dir; returns the sweep directory."""
    work = tmp_path_factory.mktemp("sweep")
    sweep_dir = work / "multirun"
    proc = run_train(*SWEEP_OVERRIDES, f"hydra.sweep.dir={sweep_dir}", cwd=work, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir
