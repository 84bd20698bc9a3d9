"""`python train.py ...` / `python -m posttrain ...` / `posttrain-train ...`: validate the command line in one line,
then hand over to @hydra.main."""

from __future__ import annotations

import sys
import time

import hydra
from omegaconf import DictConfig

from posttrain.config.compose import load_config
from posttrain.config.registry import register
from posttrain.dist import exit_rank, is_main_process, rank_overrides
from posttrain.errors import UserError
from posttrain.inputs import check_inputs
from posttrain.paths import CONF_DIR

_STARTED = time.time() - 1  # files at least this new were written by this process (1 s of mtime granularity)

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


def direction_of(metric: str, algorithm: object) -> str | None:
    """minimize | maximize for a summary.json key: the algorithm's declared direction for its own objective, else
    by the key's name (a loss or a KL falls, a reward or an accuracy rises); None when the name does not say."""
    if metric in ("objective", getattr(algorithm, "objective", None)):
        return str(getattr(algorithm, "objective_direction", "minimize"))
    if any(word in metric for word in ("loss", "kl", "asr", "attack")):
        return "minimize"
    if any(word in metric for word in ("reward", "acc", "f1", "utility", "exact")):
        return "maximize"
    return None


def _check_sweeper(overrides: list[str]) -> None:
    """A sweeper searching keys the config lacks (`hparams_search=grpo algo=d2l`: Optuna's multi-line error after
    the study started) or optimising the run's objective the wrong way round (maximising D2L's loss) is refused in
    one line."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from posttrain.algos.registry import get_algorithm

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=sweep_members(overrides)[0], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException):
        return  # a job that does not compose: the members' check below says why, in one line
    missing = object()
    for key in OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}:
        if OmegaConf.select(cfg, str(key), default=missing) is missing:
            raise UserError(f"hydra.sweeper.params: {key} is not a key of this config (algo={cfg.algo.name})")
    direction = OmegaConf.select(cfg, "hydra.sweeper.direction", default=None)
    if not isinstance(direction, str):  # the basic sweeper optimises nothing; a multi-objective list is the user's
        return
    metric = str(cfg.get("optimized_metric") or "objective")
    want = direction_of(metric, get_algorithm(str(cfg.algo.name)))
    if want is not None and want != direction:
        raise UserError(
            f"hydra.sweeper.direction={direction}, but {metric} of algo={cfg.algo.name} is better "
            f"{'lower' if want == 'minimize' else 'higher'}: hydra.sweeper.direction={want}"
        )


def _precheck_sweep(overrides: list[str], argv: list[str]) -> None:
    """Every job of a multirun composed and validated before the first one starts, and the sweeper's direction."""
    try:
        _check_sweeper(argv)
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(ex.exit_code)
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
        _precheck_sweep(overrides, [a for a in argv if not a.startswith("-")])
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
        _forget_hydras_files()
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(ex.exit_code)


def _forget_hydras_files() -> None:
    """A run refused after Hydra made its dir (a check that needs the model's modules) leaves no `.hydra/` or job
    log behind: removed when the dir holds nothing else and every file in it was written by this process."""
    import shutil
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or not is_main_process():
        return
    out = Path(HydraConfig.get().runtime.output_dir)
    files = [p for p in out.rglob("*") if p.is_file()]
    ours = all(p.stat().st_mtime >= _STARTED for p in files)
    only_hydras = all(p.relative_to(out).parts[0] == ".hydra" or p.suffix == ".log" for p in files)
    if not files or not ours or not only_hydras:
        return
    shutil.rmtree(out / ".hydra", ignore_errors=True)
    for log in out.glob("*.log"):
        log.unlink(missing_ok=True)
    if not any(out.iterdir()):
        out.rmdir()


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


def quote_non_ascii(argv: list[str]) -> list[str]:
    """`hydra.run.dir=runs/ümlaut` -> `hydra.run.dir='runs/ümlaut'`: Hydra's override grammar takes non-ASCII text
    only quoted. A value with grammar of its own (quotes, lists, sweeps, interpolations) is left as written."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        plain = not any(c in value for c in "'\"[]{}(),$")
        if eq and not arg.startswith("-") and plain and not value.isascii():
            arg = f"{key}='{value}'"
        out.append(arg)
    return out


def show_job_config(argv: list[str]) -> bool:
    """`--cfg job` (`-c job`): print the config as `posttrain.run` uses it, hw=auto resolved and the hardware
    profile and the algorithm's device defaults applied, each change named in a comment (Hydra's own print is the
    composition before them: `kernels.backend: trl` where the run uses fused). False where Hydra should answer
    (other `--cfg` values, `--package`, a multirun)."""
    flags = {a for a in argv if a.startswith("-")}
    wants = any(a in ("--cfg", "-c") and b == "job" for a, b in zip(argv, argv[1:])) or "--cfg=job" in argv
    if not wants or flags & {"-p", "--package", "-m", "--multirun"}:
        return False
    from omegaconf import OmegaConf

    from posttrain.config.compose import override_keys
    from posttrain.hardware import apply_profile

    skip = {"job", "--resolve", "--cfg", "-c", "--cfg=job"}
    overrides = [a for a in argv if a not in skip and not a.startswith(("-", "hydra.", "hydra/", "+hydra", "~hydra"))]
    try:
        cfg = load_config(overrides)
        applied = apply_profile(cfg, overrides=override_keys(overrides))
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(ex.exit_code)
    changes = ", ".join(f"{k}={v}" for k, v in applied.items() if "." in k) or "nothing"
    print(f"# as the run uses it: hw={cfg.hw.name}'s profile and {cfg.algo.name}'s device defaults set {changes}")
    print(OmegaConf.to_yaml(cfg, resolve="--resolve" in argv), end="")
    return True


def main() -> None:
    register()
    sys.argv[1:] = quote_non_ascii(sys.argv[1:])
    try:  # multi-process launch: one run dir for all ranks, ranks > 0 write nothing of their own
        sys.argv += rank_overrides(sys.argv[1:])
    except ValueError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = with_the_runs_overrides(sys.argv[1:])
    if show_job_config(sys.argv[1:]):
        return
    _precheck(sys.argv[1:])
    if any(a in ("mode=export", "mode=eval", "mode=sample") for a in sys.argv[1:]) and not any(
        a.startswith("hydra.output_subdir") for a in sys.argv[1:]
    ):
        sys.argv.append(
            "hydra.output_subdir=null"
        )  # scoring or exporting a run leaves its .hydra/ as training wrote it
    _hydra_main()
    exit_rank()  # a rank of a multi-process run: done, without the interpreter's teardown (posttrain.dist)
