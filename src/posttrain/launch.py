"""`python -m posttrain.launch <overrides>`: one process per device, through `accelerate launch`.

    python -m posttrain.launch hw=h200 model=llama3_1_8b          # accelerate launch, conf/accelerate/<hw...>.yaml
    python -m posttrain.launch --dry-run hw=a100 hw.num_devices=4 # print the command only
    python -m posttrain.launch --script tests/sweeps/seeded_train.py hw=cpu hw.num_devices=2 ...  # another entry

The accelerate config file comes from `hw.accelerate_config` (ddp | fsdp2 | deepspeed_zero2 | deepspeed_zero3, files
in conf/accelerate/), the process count from `hw.num_devices`. The launcher stamps the run directory once for all
ranks (`POSTTRAIN_RUN_STAMP`, see `posttrain.dist`). Under a multi-task submitit/SLURM job (Hydra's submitit
launcher with `tasks_per_node > 1`) no launcher is needed: `posttrain.dist.export_submitit_env()` turns the job
environment into the torch `env://` variables, so HF Trainer runs DDP across the tasks.

Several machines (SLURM): one launcher per node, `srun --ntasks-per-node=1 python -m posttrain.launch ...
hydra.run.dir=runs/$SLURM_JOB_ID` (each node's launcher starts at its own time, so the run dir is named, not stamped);
machine rank, main address and port come from the job's environment (`machine_args`). On CPU processes
every engine runs over gloo (`posttrain.engines`: accelerate alone would run an FSDP or DeepSpeed config as DDP).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from posttrain.dist import RUN_STAMP_ENV, run_stamp
from posttrain.paths import ACCELERATE_DIR

MAIN_PORT = 29500


def machine_args(num_devices: int, overrides: Sequence[str]) -> list[str]:
    """accelerate's multi-machine arguments inside a SLURM allocation of several nodes (one launcher per node, e.g.
    `srun --ntasks-per-node=1 python -m posttrain.launch ...`): the machine rank is the node's, the main address the
    first host of the job's node list, the port `MASTER_PORT` or 29500. Nothing on one machine."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    if nodes <= 1 or "SLURM_JOB_ID" not in os.environ:
        return []
    if not any(o.startswith("hydra.run.dir=") for o in overrides):
        raise ValueError(
            f"{nodes} machines: pass hydra.run.dir= (e.g. hydra.run.dir=runs/$SLURM_JOB_ID), so that every node's "
            "ranks write one run directory"
        )
    from submitit.slurm.slurm import SlurmJobEnvironment

    job = SlurmJobEnvironment()
    return [
        "--num_processes",
        str(num_devices * nodes),
        "--num_machines",
        str(nodes),
        "--machine_rank",
        str(job.node),
        "--main_process_ip",
        job.hostnames[0],
        "--main_process_port",
        os.environ.get("MASTER_PORT", str(MAIN_PORT)),
    ]


def accelerate_command(overrides: Sequence[str], script: str | None = None) -> list[str]:
    """`accelerate launch --config_file ... -m posttrain <overrides>` for the composed hw profile (`script`: a file
    that runs posttrain's CLI its own way instead, e.g. tests/sweeps/seeded_train.py)."""
    from posttrain.config.compose import load_config

    cfg = load_config(list(overrides))
    name = cfg.hw.accelerate_config or "ddp"
    config_file = ACCELERATE_DIR / f"{name}.yaml"
    if not config_file.is_file():
        available = ", ".join(sorted(p.stem for p in ACCELERATE_DIR.glob("*.yaml")))
        raise ValueError(f"hw.accelerate_config={name}: no {config_file} (available: {available})")
    if name.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise ValueError(
            f"hw.accelerate_config={name} needs DeepSpeed, which is not installed: pip install deepspeed==0.19.8 "
            "(or -e .[gpu])"
        )
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        *(machine_args(cfg.hw.num_devices, overrides) or ["--num_processes", str(cfg.hw.num_devices)]),
    ]
    if cfg.hw.device == "cpu":
        cmd += ["--num_cpu_threads_per_process", "1"]
    return cmd + ([script] if script else ["-m", "posttrain"]) + list(overrides)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    script = None
    if "--script" in argv:  # --script FILE
        at = argv.index("--script")
        script, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    from posttrain.errors import UserError

    try:
        cmd = accelerate_command(argv, script)
    except (UserError, ValueError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    env = {**os.environ, RUN_STAMP_ENV: os.environ.get(RUN_STAMP_ENV) or run_stamp()}
    print(f"{RUN_STAMP_ENV}={env[RUN_STAMP_ENV]} {shlex.join(cmd)}", flush=True)
    if dry:
        return 0
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
