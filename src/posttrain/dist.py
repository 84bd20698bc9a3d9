"""Which process this is in a multi-process run: rank, world size, the main process, SLURM/submitit tasks, and
the device a process computes on.

One run is one run directory, whatever the number of processes. Its name comes from `hydra.run.dir` in
conf/config.yaml, stamped with `POSTTRAIN_RUN_STAMP` when that is set: `python -m posttrain.launch` sets it
once for all ranks, and a rank started by a bare `accelerate launch`/`torchrun` derives it from its launcher
process's start time (`ensure_run_stamp`), so every rank names the same directory. Rank 0 writes config,
metrics and summary; ranks > 0 write nothing of their own (no Hydra output files, no log file, no summary).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

RUN_STAMP_ENV = "POSTTRAIN_RUN_STAMP"
RUN_STAMP_FORMAT = "%Y-%m-%d/%H-%M-%S"  # the `${now:...}` format of conf/config.yaml's hydra.run.dir


def rank() -> int:
    """Global rank from the launcher's environment (torchrun/accelerate/deepspeed set RANK); 0 when alone."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


def device_for(cfg: Any) -> Any:
    """The device training would use for `cfg.hw` (accelerate's: `cuda:<local rank>`, an XLA device, or the CPU
    for `hw.device=cpu`, the same rule as HF `TrainingArguments(use_cpu=...)`): where evaluation puts a model."""
    from accelerate import PartialState

    return PartialState(cpu=cfg.hw.device == "cpu").device


def exit_rank() -> None:
    """End a rank of a multi-process run once its run is done: flush what it wrote (W&B's run included), then leave
    without the interpreter's teardown. There gloo's and DeepSpeed's C++ threads, still joinable, now and then abort
    a rank ("terminate called without an active exception", SIGABRT: a ZeRO-2 D2L rank and a ZeRO-3 contrastive rank
    on 2 busy cores, the second after its process group had been destroyed), which fails a finished run and its
    sweep or job. No barrier: rank 0 may still be evaluating alone, which needs no collective. No-op alone."""
    if world_size() <= 1:
        return
    import logging

    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_stamp(when: datetime | None = None) -> str:
    return (when or datetime.now()).strftime(RUN_STAMP_FORMAT)


def ensure_run_stamp() -> str | None:
    """In a multi-process launch, make every rank stamp its run dir alike (the launcher process's start time).

    `accelerate launch`/torchrun start every local rank from one agent process, so its start time names the same
    directory in all of them, where each rank's own clock could differ by a second.
    """
    if RUN_STAMP_ENV in os.environ or world_size() <= 1:
        return os.environ.get(RUN_STAMP_ENV)
    import psutil

    os.environ[RUN_STAMP_ENV] = run_stamp(datetime.fromtimestamp(psutil.Process(os.getppid()).create_time()))
    return os.environ[RUN_STAMP_ENV]


def rank_overrides(argv: Sequence[str]) -> list[str]:
    """Hydra overrides that keep ranks > 0 out of the run directory; raises ValueError on a launch that can't work."""
    if world_size() <= 1:
        return []
    if any(a in ("-m", "--multirun") for a in argv):
        raise ValueError(
            "-m/--multirun inside a multi-process launch: sweep from one process (e.g. hydra/launcher=submitit_slurm) "
            "and let each job be the multi-process run"
        )
    ensure_run_stamp()
    if is_main_process():
        return []
    return ["hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]


def export_submitit_env() -> bool:
    """Inside a submitit job with several tasks and no torch env yet: export MASTER_ADDR/PORT, RANK, WORLD_SIZE."""
    if "RANK" in os.environ or "SUBMITIT_EXECUTOR" not in os.environ:
        return False
    try:
        from submitit import JobEnvironment
        from submitit.helpers import TorchDistributedEnvironment

        if JobEnvironment().num_tasks <= 1:
            return False
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    except (ImportError, RuntimeError):
        return False
    return True


def launch_hint(cfg: Any, argv: Sequence[str] | None = None) -> str | None:
    """The `python -m posttrain.launch ...` line a `hw.num_devices > 1` run needs (None for one device)."""
    if cfg.hw.num_devices <= 1:
        return None
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", "-m", "posttrain.launch", *(shlex.quote(a) for a in args if a != "mode=plan")])
