"""2 CPU processes under each engine against 1 process, at the same global batch and seed: losses, grad norms and
trained weights, for GRPO (LoRA and full fine-tuning), D2L and contrastive on the tiny models.

    python experiments/scale_out/compare.py                      # every case x engine -> results.csv, table on stdout
    python experiments/scale_out/compare.py --cases grpo_lora --engines fsdp2

Every run is `tests/sweeps/seeded_train.py` (train.py whose GRPO sampling draws each global row from its own
generator, so both layouts sample the same completions; it also writes the trained weights, gathered from the
shards). The 2-process runs go through `python -m posttrain.launch ... hw.accelerate_config=<engine>`.
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


def run(case: str, engine: str | None, out: Path) -> subprocess.CompletedProcess:
    """One run of `case`: 1 process (engine None) or 2 under `engine`; its run dir is `out`."""
    overrides, batch = CASES[case]
    args = [*COMMON, *overrides, f"hydra.run.dir={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if engine is None:
        cmd = [sys.executable, str(HELPER), *args, f"trainer.per_device_batch_size={2 * batch}"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "posttrain.launch",
            "--script",
            str(HELPER),
            "hw=cpu",
            "hw.num_devices=2",
            f"hw.accelerate_config={engine}",
            *args,
            f"trainer.per_device_batch_size={batch}",
        ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=out.parent)


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
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results.csv"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            ref = Path(tmp) / f"{case}_one"
            proc = run(case, None, ref)
            if proc.returncode:
                print(f"{case}: the 1-process run failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            for engine in args.engines.split(","):
                out = Path(tmp) / f"{case}_{engine}"
                proc = run(case, engine, out)
                row = {"case": case, "engine": engine}
                if proc.returncode:
                    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
                    row["ran_as"] = "refused: " + err[0] if err else "failed"
                    if not err:
                        print(proc.stderr[-3000:], file=sys.stderr)
                else:
                    row |= {"ran_as": distributed_as(proc.stdout), **compare(ref, out)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    fields = [
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
    ]
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
