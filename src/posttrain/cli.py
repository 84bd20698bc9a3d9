"""`python train.py ...` / `python -m posttrain ...` / `posttrain-train ...`: validate the command line in one line,
then hand over to @hydra.main."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from posttrain.config.compose import load_config
from posttrain.config.registry import register
from posttrain.dist import is_main_process, rank_overrides
from posttrain.errors import UserError
from posttrain.inputs import check_inputs
from posttrain.paths import CONF_DIR


def _precheck(argv: list[str]) -> None:
    """Compose once before Hydra does, so a typo or bad value fails in one line (multirun: Hydra checks)."""
    if any(a in ("-m", "--multirun") for a in argv) or any(a.startswith(("--", "-")) for a in argv):
        return
    overrides = [a for a in argv if not a.startswith(("hydra.", "hydra/", "+hydra", "~hydra"))]
    try:
        cfg = load_config(overrides, hf_names=False)  # run() checks HF names: no torch import here
        run_dir = next((a.split("=", 1)[1] for a in reversed(argv) if a.startswith("hydra.run.dir=")), None)
        check_inputs(cfg, run_dir, overrides)  # run dir creatable, local data file readable: before Hydra writes
        # before Hydra writes .hydra/ into a dir that may hold another run (rank 0 only: ranks > 0 write nothing)
        if run_dir and cfg.mode == "train" and is_main_process():
            from pathlib import Path

            from posttrain.checkpoints import (
                check_run_identity,
                finished_message,
                finished_step,
                identity,
                resolve_resume,
            )
            from posttrain.run_lock import check_unlocked

            check_unlocked(Path(run_dir))  # another process trains there: refused before Hydra writes into it
            resume = resolve_resume(cfg.resume, Path(run_dir), verbose=False)
            check_run_identity(Path(run_dir), identity(cfg), resume, write=False, auto=cfg.resume == "auto")
            done = finished_step(resume, cfg)
            if done is not None:  # before Hydra rewrites the finished run's .hydra/
                print(finished_message(Path(run_dir), done, cfg))
                sys.exit(0)
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(ex.exit_code)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> float | None:
    from posttrain.run import run

    try:
        return run(cfg)
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(ex.exit_code)


def main() -> None:
    register()
    try:  # multi-process launch: one run dir for all ranks, ranks > 0 write nothing of their own
        sys.argv += rank_overrides(sys.argv[1:])
    except ValueError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(2)
    _precheck(sys.argv[1:])
    _hydra_main()
