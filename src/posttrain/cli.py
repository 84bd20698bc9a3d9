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

MAX_CHECKED_MEMBERS = 256  # a larger grid is checked on its first members (each check composes once, ~0.1 s)


def sweep_members(overrides: list[str]) -> list[list[str]]:
    """The override lists of a multirun's jobs: the basic sweeper's grid of `a,b` and `range(...)` lists. A sweep
    another sweeper draws from (`interval(...)`, Optuna's) is left out: its jobs compose with the key's default."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    axes: list[list[str]] = []
    for override in OverridesParser.create().parse_overrides(overrides):
        text = override.input_line or ""
        if not override.is_sweep_override():
            axes.append([text])
        elif isinstance(override.value(), (ChoiceSweep, RangeSweep)):
            prefix = text.split("=", 1)[0]
            axes.append([f"{prefix}={v}" for v in override.sweep_string_iterator()])
    return [list(m) for m in itertools.islice(itertools.product(*axes), MAX_CHECKED_MEMBERS)]


def _precheck_sweep(overrides: list[str]) -> None:
    """Every job of a multirun composed and validated before the first one starts."""
    for member in sweep_members(overrides):
        try:
            load_config(member, hf_names=False)
        except UserError as ex:
            changed = [o for o in member if o not in overrides]
            print(f"error: sweep job {' '.join(changed) or '(all)'}: {ex}", file=sys.stderr)
            sys.exit(ex.exit_code)


def _precheck(argv: list[str]) -> None:
    """Compose once before Hydra does, so a typo or bad value fails in one line; a multirun, once per job."""
    if any(a in ("-m", "--multirun") for a in argv):
        overrides = [a for a in argv if not a.startswith(("-", "hydra.", "hydra/", "+hydra", "~hydra"))]
        _precheck_sweep(overrides)
        return
    if any(a.startswith(("--", "-")) for a in argv):
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


READS_A_RUN = ("mode=eval", "mode=export", "mode=sample")
_RUN_ONLY = ("mode", "resume", "eval", "export", "sample", "hydra")  # keys of the training command not carried over


def with_the_runs_overrides(argv: list[str]) -> list[str]:
    """`mode=eval|export|sample hydra.run.dir=<run>` reads that run's own command line (`.hydra/overrides.yaml`):
    its overrides come first, and a key given here replaces the run's."""
    from pathlib import Path

    import yaml

    from posttrain.config.compose import override_keys

    if not any(a in READS_A_RUN for a in argv):
        return argv
    run_dir = next((a.split("=", 1)[1] for a in reversed(argv) if a.startswith("hydra.run.dir=")), None)
    saved = Path(run_dir) / ".hydra" / "overrides.yaml" if run_dir else None
    if saved is None or not saved.is_file():
        return argv
    given = override_keys(argv)
    taken = []
    for override in yaml.safe_load(saved.read_text()) or []:
        keys = override_keys([override])
        if keys & given or any(k.split(".")[0].lstrip("+~") in _RUN_ONLY for k in keys):
            continue
        taken.append(override)
    if taken:
        print(f"{run_dir}: the run's own overrides apply: {' '.join(taken)}", flush=True)
    return [*taken, *argv]


def main() -> None:
    register()
    try:  # multi-process launch: one run dir for all ranks, ranks > 0 write nothing of their own
        sys.argv += rank_overrides(sys.argv[1:])
    except ValueError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = with_the_runs_overrides(sys.argv[1:])
    _precheck(sys.argv[1:])
    if any(a in ("mode=export", "mode=eval", "mode=sample") for a in sys.argv[1:]) and not any(
        a.startswith("hydra.output_subdir") for a in sys.argv[1:]
    ):
        sys.argv.append(
            "hydra.output_subdir=null"
        )  # scoring or exporting a run leaves its .hydra/ as training wrote it
    _hydra_main()
