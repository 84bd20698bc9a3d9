"""Checks of a run's inputs that the CLI makes before Hydra writes anything: the run directory can be created (with
some free space on its disk), and
the local data file reads as the loaders will read it (UTF-8, well-formed rows, valid prompts).

Each problem is a one-line `UserError` (exit 2). Nothing here imports torch; the data check imports `datasets`
only when the run has a local data file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from posttrain.errors import DataError, UserError


class RunDirError(UserError):
    """The run directory cannot be created or written."""


MIN_FREE_BYTES = 100 * 2**20  # below it a run fails at its first write (Hydra's .hydra/, a checkpoint of a LoRA)


def _run_dir_template(overrides: Sequence[str]) -> str:
    """`hydra.run.dir` as configured (unresolved: `runs/${now:...}/...`)."""
    from hydra import compose, initialize_config_dir

    from posttrain.config.compose import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    return cfg.hydra.run._get_node("dir")._value()


def check_run_dir(run_dir: str) -> None:
    """RunDirError unless `run_dir` (a path, possibly with `${...}` parts not resolved yet) exists as a writable
    directory or can be created: its nearest existing ancestor must be a writable directory. Creates nothing."""
    fixed = run_dir.split("${", 1)[0]  # the part known before Hydra resolves the rest
    target = Path(fixed or ".").absolute()
    ancestor = target
    while not (ancestor.exists() or ancestor.is_symlink()):
        ancestor = ancestor.parent
    where = f"hydra.run.dir={run_dir}: cannot create the run directory"
    if ancestor.is_symlink() and not ancestor.exists():
        raise RunDirError(f"{where} ({ancestor} is a broken symlink)")
    if not ancestor.is_dir():
        raise RunDirError(f"{where} ({ancestor} is a file)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunDirError(f"{where} ({ancestor} is not writable)")
    free = shutil.disk_usage(ancestor).free
    if free < MIN_FREE_BYTES:
        raise RunDirError(
            f"hydra.run.dir={run_dir}: {free / 2**20:.0f} MiB free on its disk; a run writes its config, metrics and "
            f"checkpoints there (at least {MIN_FREE_BYTES // 2**20} MiB)"
        )


def check_data(cfg: DictConfig) -> None:
    """DataError (one line, file:line) for a local data file the run would fail on after loading the model."""
    path = None if OmegaConf.is_missing(cfg.data, "path") else cfg.data.get("path")
    if path and cfg.data.source == "generator":  # the generator builds data.name's rows and never opens a path
        raise DataError(
            f"data.path={path} is not read with data.source=generator (the built-in {cfg.data.name} data); "
            "add data.source=jsonl for a local file or data.source=hub for a hub dataset"
        )
    if cfg.mode == "plan" or not path or (cfg.data.source != "jsonl" and not Path(path).exists()):  # a hub name
        return
    if not Path(path).exists():
        raise DataError(f"dataset file not found: {path}")
    from posttrain.data.jsonl import check_data_file

    check_data_file(path)


def check_inputs(cfg: DictConfig, run_dir: str | None, overrides: Sequence[str]) -> None:
    """Every check above; `run_dir` is the command line's `hydra.run.dir` (None: the configured default)."""
    check_run_dir(run_dir if run_dir is not None else _run_dir_template(overrides))
    check_data(cfg)
