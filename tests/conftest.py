"""Shared fixtures: composed configs for tiny models, and a helper to run `train.py` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")


def run_train(*overrides: str, cwd: Path = ROOT, timeout: int = 900) -> subprocess.CompletedProcess:
    """`python train.py <overrides>` with captured output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def compose():
    from posttrain.config.compose import load_config

    def _compose(*overrides: str, run_dir: Path | None = None):
        cfg = load_config(list(overrides))
        if run_dir is not None:
            from omegaconf import open_dict

            with open_dict(cfg):
                cfg.run_dir = str(run_dir)
        return cfg

    return _compose
