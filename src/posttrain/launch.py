"""`python -m posttrain.launch <overrides>`: one process per device, through `accelerate launch`.

    python -m posttrain.launch hw=h200 model=llama3_1_8b          # accelerate launch, conf/accelerate/<hw...>.yaml
    python -m posttrain.launch --dry-run hw=a100 hw.num_devices=4 # print the command only
    python -m posttrain.launch --script tests/sweeps/seeded_train.py hw=cpu hw.num_devices=2 ...  # another entry

The accelerate config file comes from `hw.accelerate_config` (ddp | fsdp2 | deepspeed_zero2 | deepspeed_zero3, files
in conf/accelerate/), the process count from `hw.num_devices`. The launcher stamps the run directory once for all
ranks (`POSTTRAIN_RUN_STAMP`, see `posttrain.dist`). Under a multi-task submitit/SLURM job (Hydra's submitit
launcher with `tasks_per_node > 1`) no launcher is needed: `posttrain.dist.export_submitit_env()` turns the job
environment into the torch `env://` variables, so HF Trainer runs DDP across the tasks.

Several machines: pass `hydra.run.dir=` yourself (each node's launcher starts at its own time). On CPU processes
every engine runs over gloo (`posttrain.engines`: accelerate alone would run an FSDP or DeepSpeed config as DDP).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from posttrain.dist import RUN_STAMP_ENV, run_stamp
from posttrain.paths import ACCELERATE_DIR


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
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "--num_processes",
        str(cfg.hw.num_devices),
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
