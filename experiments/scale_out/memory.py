"""`mode=plan`'s per-process peak against the measured peak RSS of each process, for 2 CPU processes under FSDP2 and
DeepSpeed ZeRO-2/3 (and the same run on one process, for the plan's error without sharding): GRPO full fine-tuning
of a random-init Llama-shaped model of 300M parameters (large enough that training state, not the Python process, is
most of the memory).

    python -m experiments.scale_out.memory                    # every engine -> results/memory.csv, one JSON line each
    python -m experiments.scale_out.memory --engines fsdp2

The plan is composed in this interpreter (experiments/memory_plan/validate.py's `planned`); the measurement is the
largest `ru_maxrss` of the processes `python -m posttrain.launch ...` starts (the ranks; the launchers are smaller),
read in a fresh wrapper process.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from experiments.memory_plan.validate import _WRAP, GIB, planned

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("one_process", "fsdp2", "deepspeed_zero2", "deepspeed_zero3")
ARCH = dict(
    hidden_size=1536,
    intermediate_size=4096,
    num_hidden_layers=8,
    num_attention_heads=12,
    num_key_value_heads=4,
    head_dim=128,
    vocab_size=32000,
    max_position_embeddings=1024,
)
COMMON = [
    "model=tiny_llama",
    "hw=cpu",
    "hw.num_devices=2",
    *(f"model.arch.{k}={v}" for k, v in ARCH.items()),
    "model.lora.enabled=false",
    "algo.trl.beta=0",
    "algo.max_prompt_length=64",
    "algo.trl.max_completion_length=16",
    "algo.trl.num_generations=2",
    "trainer.per_device_batch_size=2",
    "trainer.max_steps=2",
    "trainer.save_steps=0",
    "trainer.progress_bar=false",
    "algo.heldout=0",
]


def measured(args: list[str], processes: int = 2) -> float:
    """The largest peak RSS (bytes) of the processes of a launch of `args` (one process: plain train.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        entry = ["-m", "posttrain.launch"] if processes > 1 else [str(ROOT / "train.py")]
        cmd = [sys.executable, *entry, *args, f"hydra.run.dir={tmp}/run"]
        out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True, cwd=ROOT)
    rss, rc = out.stdout.split()[-2:]
    if int(rc):
        raise RuntimeError(f"training failed ({rc}): {out.stderr}")
    return float(rss)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "memory.csv")
    args = ap.parse_args(argv)
    rows = []
    for engine in args.engines.split(","):
        alone = engine == "one_process"  # the same run on one process, no engine: the plan's error without sharding
        overrides = [*(o for o in COMMON if not (alone and o == "hw.num_devices=2")), f"hw.accelerate_config={engine}"]
        if alone:
            overrides = [o for o in overrides if not o.startswith("hw.accelerate_config=")]
        plan = planned(overrides)
        rss = measured(overrides, 1 if alone else 2) / GIB
        row = {
            "engine": engine,
            "params_m": round(plan["params_total"] / 1e6, 1),
            "planned_gib": plan["peak_gib"],
            "planned_phase": plan["peak_phase"],
            "measured_gib": round(rss, 3),
            "error": round(plan["peak_gib"] / rss - 1, 4),
            "components_gib": json.dumps(plan["components_gib"]),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
