"""2 CPU processes under each engine against 1 process, at the same global batch and seed, for GRPO (LoRA and full
fine-tuning), D2L and contrastive on the tiny models: losses, grad norms and trained weights; resume-exactness of
the 2-process run; and its checkpoint evaluated by one process (`mode=eval`) against the 1-process run's.

    python experiments/scale_out/compare.py          # every case x engine -> results.csv, one JSON line each
    python experiments/scale_out/compare.py --cases grpo_lora --engines fsdp2

The equality runs are `tests/sweeps/seeded_train.py` (train.py whose GRPO sampling draws each global row from its
own generator, so both layouts sample the same completions; it also writes the trained weights, gathered from the
shards). The resume runs are plain train.py (sampling continues from the checkpoint's RNG state): 4 steps straight
against 2 steps, stopped, and resumed to 4. The 2-process runs go through `python -m posttrain.launch ...
hw.accelerate_config=<engine>`; tests/scale_out runs a subset of the same functions.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "tests" / "sweeps" / "seeded_train.py"
ENGINES = ("ddp", "fsdp2", "deepspeed_zero2", "deepspeed_zero3")
COMMON = ("trainer.max_steps=3", "trainer.progress_bar=false", "trainer.save_steps=0", "seed=3")
# mode=eval of the case's checkpoints is compared where it scores something (contrastive's tiny case has no eval set)
EVALUATES = {"grpo_lora": True, "grpo_full": True, "d2l": True, "contrastive": False}
# name -> (overrides, per-device batch of the 2-process run; the 1-process run takes twice that)
CASES: dict[str, tuple[tuple[str, ...], int]] = {
    "grpo_lora": (("algo.trl.num_generations=2", "algo.trl.beta=0.04"), 3),
    "grpo_full": (("algo.trl.num_generations=2", "algo.trl.beta=0.04", "model.lora.enabled=false"), 3),
    "d2l": (
        (
            "algo=d2l",
            "data=d2l_synth",
            "data.num_train=16",
            "data.num_eval=2",
            "algo.max_new_tokens=3",
            "algo.eval_at_end=false",
            "trainer.lr=2e-3",
        ),
        2,
    ),
    "contrastive": (
        (
            "algo=contrastive",
            "data=contrastive_injection",
            "data.num_train=32",
            "data.num_eval=0",
            "algo.head_hidden_dim=32",
            "algo.proj_dim=16",
            "trainer.lr=1e-2",
            "algo.eval_at_end=false",
        ),
        2,
    ),
}


def run(case: str, engine: str | None, out: Path, *extra: str, seeded: bool = True) -> subprocess.CompletedProcess:
    """One run of `case` (+ `extra` overrides): 1 process (engine None) or 2 under `engine`; its run dir is `out`.
    `seeded`: through tests/sweeps/seeded_train.py (else plain train.py)."""
    overrides, batch = CASES[case]
    args = [*COMMON, *overrides, *extra, f"hydra.run.dir={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    entry = str(HELPER if seeded else ROOT / "train.py")
    if engine is None:
        cmd = [sys.executable, entry, *args, f"trainer.per_device_batch_size={2 * batch}"]
    else:
        launch = [sys.executable, "-m", "posttrain.launch", "--script", entry, "hw=cpu", "hw.num_devices=2"]
        cmd = [*launch, f"hw.accelerate_config={engine}", *args, f"trainer.per_device_batch_size={batch}"]
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=out.parent)
    if proc.returncode:
        raise RuntimeError(f"{case} under {engine or 'one process'} failed:\n{proc.stderr[-3000:]}")
    return proc


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(run_dir: Path, which: str = "trained") -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / f"{which}.safetensors")


def compare(one: Path, two: Path) -> dict[str, float]:
    """Over the steps: the largest absolute difference of the logged loss (GRPO's is near 0: relative differences
    mean nothing there) with the largest |loss| for scale, and the largest relative difference of the grad norm;
    of the trained weights: the largest absolute difference, and that over the largest change training made."""
    m1, m2 = metrics(one), metrics(two)
    assert [m["step"] for m in m1] == [m["step"] for m in m2], (one, two)
    row: dict[str, float] = {"steps": len(m1)}
    row["loss_max_abs"] = max(abs(a["loss"] - b["loss"]) for a, b in zip(m1, m2))
    row["loss_scale"] = max(abs(a["loss"]) for a in m1)
    row["grad_norm_rel"] = max(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"] for a, b in zip(m1, m2))
    w0, w1, w2 = weights(one, "initial"), weights(one), weights(two)
    assert w1.keys() == w2.keys() == w0.keys(), sorted(set(w1) ^ set(w2))[:5]
    row["weight_max_abs"] = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    update = max(float((w1[k] - w0[k]).abs().max()) for k in w1)
    row["weight_diff_over_update"] = row["weight_max_abs"] / update
    row["n_tensors"] = len(w1)
    return row


def resume_gap(case: str, engine: str, tmp: Path) -> dict[str, float]:
    """Under `engine` on 2 processes: 4 steps straight against 2 steps, stopped, then `resume=auto` to 4; the largest
    differences of steps 3-4 (loss absolute, grad norm relative)."""
    schedule = ("trainer.max_steps=4", "trainer.save_steps=2")
    straight, resumed = tmp / f"{case}_{engine}_straight", tmp / f"{case}_{engine}_resumed"
    run(case, engine, straight, *schedule, seeded=False)
    run(case, engine, resumed, *schedule, "trainer.stop_step=2", seeded=False)
    run(case, engine, resumed, *schedule, "resume=auto", seeded=False)
    a = {m["step"]: m for m in metrics(straight)}
    b = {m["step"]: m for m in metrics(resumed)}
    assert sorted(b) == sorted(a) == [1, 2, 3, 4], (sorted(a), sorted(b))
    later = (3, 4)
    return {
        "resume_loss_max_abs": max(abs(a[s]["loss"] - b[s]["loss"]) for s in later),
        "resume_grad_norm_rel": max(abs(a[s]["grad_norm"] - b[s]["grad_norm"]) / a[s]["grad_norm"] for s in later),
    }


def evaluated(run_dir: Path) -> dict[str, float]:
    """The figures `mode=eval` reports for `run_dir`'s newest checkpoint on one process (`objective` and every
    `eval_*` number)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "train.py"), "mode=eval", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=run_dir.parent)
    if proc.returncode:
        raise RuntimeError(f"mode=eval of {run_dir} failed:\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"run_dir"')][-1]
    out = json.loads(line)
    return {
        k: float(v)
        for k, v in sorted(out.items())
        if (k == "objective" or k.startswith("eval_")) and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def eval_gap(one: dict[str, float], two: dict[str, float]) -> dict[str, float | str]:
    """The headline figure (`objective`, else the first) of both evaluations and the largest difference of any."""
    assert one.keys() == two.keys() and one, (sorted(one), sorted(two))
    key = "objective" if "objective" in one else next(iter(one))
    return {
        "eval_figure": key,
        "eval_one_process_run": one[key],
        "eval_two_process_run": two[key],
        "eval_max_abs_diff": max(abs(one[k] - two[k]) for k in one),
    }


def distributed_as(stdout: str) -> str:
    """accelerate's type and the model wrapper rank 0 trained with (tests/sweeps/seeded_train.py's JSON line)."""
    found = re.search(r'\{"rank": 0, [^\n]*?\}', stdout)
    if not found:
        return "?"
    info = json.loads(found.group(0))
    return f"{info['distributed_type'].split('.')[-1]}/{info['wrapped']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "compare.csv")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            ref = Path(tmp) / f"{case}_one"
            run(case, None, ref)
            ref_eval = evaluated(ref) if EVALUATES[case] else None
            for engine in args.engines.split(","):
                row: dict = {"case": case, "engine": engine}
                refused = refusal(case, engine)
                if refused:
                    rows.append(row | {"ran_as": refused})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                out = Path(tmp) / f"{case}_{engine}"
                row["ran_as"] = distributed_as(run(case, engine, out).stdout)
                row |= compare(ref, out)
                row |= resume_gap(case, engine, Path(tmp))
                if ref_eval is not None:
                    row |= eval_gap(ref_eval, evaluated(out))
                rows.append(row)
                print(json.dumps(row), flush=True)
    args.out.parent.mkdir(exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return 0


def refusal(case: str, engine: str) -> str | None:
    """The one-line error of a combination posttrain refuses, from `mode=plan` (nothing trains)."""
    overrides, _ = CASES[case]
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "mode=plan",
        "hw=cpu",
        "hw.num_devices=2",
        f"hw.accelerate_config={engine}",
        *overrides,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    return "refused: " + errors[0].removeprefix("error: ") if proc.returncode and errors else None


FIELDS = [
    "case",
    "engine",
    "ran_as",
    "steps",
    "loss_max_abs",
    "loss_scale",
    "grad_norm_rel",
    "weight_max_abs",
    "weight_diff_over_update",
    "n_tensors",
    "resume_loss_max_abs",
    "resume_grad_norm_rel",
    "eval_figure",
    "eval_one_process_run",
    "eval_two_process_run",
    "eval_max_abs_diff",
]


if __name__ == "__main__":
    sys.exit(main())
