"""`python train.py argv` inside this interpreter: exit code, stdout and stderr, with the interpreter's state (argv,
environment, Hydra, the root logger, registered rewards) as it was before. For tests and notebooks that check a whole
command line without paying a fresh interpreter's imports; a subprocess is the stricter check (output of loggers
created before the call is not captured here)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import traceback


def run_cli_inprocess(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `posttrain.cli.main()` with `argv`; `env` is set for the call (PYTHONPATH
    excepted: a subprocess's import path cannot be changed in process)."""
    from hydra.core.global_hydra import GlobalHydra

    import posttrain.cli as cli
    from posttrain.rewards import REWARDS

    env = {k: v for k, v in (env or {}).items() if k != "PYTHONPATH"}
    saved_rewards = dict(REWARDS)  # a reward registered during the call must not outlive it
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    saved_argv, out, err, rc = sys.argv, io.StringIO(), io.StringIO(), 0
    root = logging.getLogger()
    saved_logging = (root.handlers[:], root.level)  # Hydra's job logging reconfigures the root logger
    sys.argv = ["train.py", *argv]  # Hydra names the job after it, as `python train.py` does
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as ex:
                rc = ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
            except BaseException:
                traceback.print_exc()
                rc = 1
    finally:
        sys.argv = saved_argv
        REWARDS.clear()
        REWARDS.update(saved_rewards)
        GlobalHydra.instance().clear()
        for handler in root.handlers[:]:
            if handler not in saved_logging[0]:
                root.removeHandler(handler)
                handler.close()
        root.handlers[:] = saved_logging[0]
        root.setLevel(saved_logging[1])
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue()
