"""Shared fixtures: composed configs for tiny models, and helpers to run `train.py`: as a subprocess (a fresh
interpreter: terminal output, signals, launchers) or in this interpreter (no seconds of imports per run)."""

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
# one CPU thread per process (this one and every `train.py` it starts), unless the caller set OMP_NUM_THREADS:
# the tiny models gain nothing from a second thread, `make test` runs two pytest workers on a 2-core machine, and
# on a loaded machine two OpenMP threads per process waiting on each other made the in-process tests 6x slower
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: `--dist loadfile`, one file per worker at a time) the files holding slow
    tests are handed out first and the many short files fill in behind them, so that no worker starts a minute-long
    file while the other runs out of work. Each file keeps its order; a run without workers keeps pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    rank = {f: (f not in slow, i) for i, f in enumerate(files)}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


def experiment_script(path: Path):
    """An experiments/ script (`report.py`, `run.py`: scripts, not a package) loaded as a module, for calling its
    functions or `main(argv)` in this interpreter; a sibling it imports by name resolves while it loads."""
    import importlib.util

    sys.path.insert(0, str(path.parent))
    siblings = {p.stem for p in path.parent.glob("*.py")}
    try:
        spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(path.parent))
        for name in siblings & set(sys.modules):  # `run`, `report`: not modules for other tests to find
            if getattr(sys.modules[name], "__file__", "") and Path(sys.modules[name].__file__).parent == path.parent:
                del sys.modules[name]
    return module


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


def run_cli(*overrides: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python train.py <overrides>` in this interpreter (`posttrain.cli.main`: the one-line precheck, Hydra, `run`),
    run from `cwd`, as run_train's CompletedProcess. For end-to-end checks that need no fresh interpreter: a
    subprocess pays several seconds of imports per call. Output of loggers made before the call is not captured."""
    from posttrain.cli_inprocess import run_cli_inprocess

    before = Path.cwd()
    os.chdir(cwd)
    try:
        rc, out, err = run_cli_inprocess(list(overrides), env=env)
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess([str(ROOT / "train.py"), *overrides], rc, out, err)


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
