"""`mode=plan`'s per-process peak against the measured peak RSS of each process, for 2 CPU processes under FSDP2 and
DeepSpeed ZeRO-2/3 (and the same run on one process, for the plan's error without sharding): GRPO full fine-tuning
of random-init Llama-shaped models of 300M parameters with an untied output projection (`untied`) and of 222M with
twice the layers and a tied one (`tied`): large enough that training state, not the Python process, is most of the
memory, and shaped differently enough that the root (embedding, head) and the layers weigh differently.

    python -m experiments.scale_out.memory                    # every engine -> results/memory.csv, one JSON line each
    python -m experiments.scale_out.memory --shapes tied --engines fsdp2,deepspeed_zero3 --append
    python -m experiments.scale_out.memory --replan           # the plan's columns again, the measurements kept

The plan is composed in this interpreter (experiments/memory_plan/validate.py's `planned`); the measurement is the
largest `ru_maxrss` of the processes `python -m posttrain.launch ...` starts (the ranks; the launchers are smaller),
read in a fresh wrapper process. Each run is measured twice: with glibc's default allocator settings, which keep
freed blocks below its (adaptive, up to 32 MiB) mmap threshold in the heap, and with `MALLOC_MMAP_THRESHOLD_=65536`,
under which every freed block of 64 KiB or more goes back to the system at once, so that the peak RSS is the peak
of live memory: the figure the plan models (and CUDA's `max_memory_allocated` reports), without the allocator's
retention.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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
SHAPES = {
    "untied": ARCH,
    "tied": ARCH
    | dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=8)
    | dict(tie_word_embeddings="true"),
}
COMMON = [
    "model=tiny_llama",
    "hw=cpu",
    "hw.num_devices=2",
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


RETURNED = {"MALLOC_MMAP_THRESHOLD_": "65536"}  # glibc: freed blocks of 64 KiB or more go back to the system


def measured(args: list[str], processes: int = 2, env: dict[str, str] | None = None) -> float:
    """The largest peak RSS (bytes) of the processes of a launch of `args` (one process: plain train.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        entry = ["-m", "posttrain.launch"] if processes > 1 else [str(ROOT / "train.py")]
        cmd = [sys.executable, *entry, *args, f"hydra.run.dir={tmp}/run"]
        out = subprocess.run(
            [sys.executable, "-c", _WRAP, *cmd],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    rss, rc = out.stdout.split()[-2:]
    if int(rc):
        raise RuntimeError(f"training failed ({rc}): {out.stderr}")
    return float(rss)


def overrides_of(shape: str, engine: str) -> list[str]:
    """The run's overrides; `one_process`: the same run on one process, no engine (the plan's error unsharded)."""
    alone = engine == "one_process"
    arch = [f"model.arch.{k}={v}" for k, v in SHAPES[shape].items()]
    kept = [o for o in COMMON if not (alone and o == "hw.num_devices=2")]
    return [*kept, *arch] if alone else [*kept, *arch, f"hw.accelerate_config={engine}"]


def with_plan(row: dict) -> dict:
    """`row` (shape, engine and the two measured peaks) with the plan's columns for its overrides."""
    plan = planned(overrides_of(row["shape"], row["engine"]))
    rss, live = float(row["measured_gib"]), float(row["returned_gib"])
    return {
        "shape": row["shape"],
        "engine": row["engine"],
        "params_m": round(plan["params_total"] / 1e6, 1),
        "planned_gib": plan["peak_gib"],
        "planned_phase": plan["peak_phase"],
        "measured_gib": round(rss, 3),
        "error": round(plan["peak_gib"] / rss - 1, 4),
        "returned_gib": round(live, 3),
        "returned_error": round(plan["peak_gib"] / live - 1, 4),
        "components_gib": json.dumps(plan["components_gib"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "memory.csv")
    ap.add_argument("--append", action="store_true", help="keep --out's rows of the other shapes and engines")
    ap.add_argument("--replan", action="store_true", help="recompute --out's plan columns only (no runs)")
    args = ap.parse_args(argv)
    rows = []
    if args.replan:
        with open(args.out, newline="") as f:
            rows = [with_plan(r) for r in csv.DictReader(f)]
    for shape, engine in ((s, e) for s in args.shapes.split(",") for e in args.engines.split(",")):
        if args.replan:
            break
        overrides, processes = overrides_of(shape, engine), 1 if engine == "one_process" else 2
        rss, live = measured(overrides, processes) / GIB, measured(overrides, processes, RETURNED) / GIB
        row = with_plan({"shape": shape, "engine": engine, "measured_gib": rss, "returned_gib": live})
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.append and args.out.is_file():
        with open(args.out, newline="") as f:
            done = {(r["shape"], r["engine"]) for r in rows}
            rows = [r for r in csv.DictReader(f) if (r["shape"], r["engine"]) not in done] + rows
    rows.sort(key=lambda r: (list(SHAPES).index(r["shape"]), ENGINES.index(r["engine"])))
    args.out.parent.mkdir(exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
