"""D2L runs' logged training metrics averaged over windows of steps, as one markdown table: runs with the same
`seed` and data draw the same batches in the same order, so their windows compare step for step.

    python experiments/d2l_smollm2/train_windows.py --steps 300 --window 100 --keys ce_loss,locality_loss \
        "no locality=results/probes/curriculum_fact1_then_facts3/stage2_facts3_1000steps" \
        "coef 1=results/probes/curriculum_fact1_then_facts3/stage2_locality_300steps"

A logged row at step s averages the steps since the previous log (`trainer.logging_steps`), so a window (a, b]
takes the rows logged at steps a < s <= b; "-" where a run logged no row of that key in the window. A RUN_DIR is a
raw run folder (its metrics.jsonl): those of the examples are not in git since 2026-12-01.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posttrain.callbacks import read_metrics


def window_means(run: Path, key: str, steps: int, window: int) -> list[float | None]:
    """Mean of `key` over the rows of `run`'s metrics.jsonl logged in each window (0, window], ..., up to `steps`."""
    rows = [r for r in read_metrics(Path(run) / "metrics.jsonl") if r.get(key) is not None]
    if not rows and not (Path(run) / "metrics.jsonl").is_file():
        raise SystemExit(f"{run}: no metrics.jsonl")
    means: list[float | None] = []
    for start in range(0, steps, window):
        vals = [float(r[key]) for r in rows if start < int(r["step"]) <= start + window]
        means.append(sum(vals) / len(vals) if vals else None)
    return means


def table(runs: list[tuple[str, Path]], keys: list[str], steps: int, window: int) -> str:
    """Rows: windows; columns: each key of each run."""
    cols = [(f"{key}, {label}", window_means(run, key, steps, window)) for key in keys for label, run in runs]
    lines = ["| steps | " + " | ".join(name for name, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for i, start in enumerate(range(0, steps, window)):
        cells = ["-" if c[i] is None else f"{c[i]:.3f}" for _, c in cols]
        lines.append(f"| {start + 1}-{min(start + window, steps)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="LABEL=RUN_DIR (a run directory with metrics.jsonl)")
    p.add_argument("--steps", type=int, required=True, help="the last step to include")
    p.add_argument("--window", type=int, default=100)
    p.add_argument("--keys", default="ce_loss", help="comma-separated logged metrics")
    args = p.parse_args(argv)
    runs = []
    for spec in args.runs:
        label, sep, run = spec.partition("=")
        if not sep or not run:
            raise SystemExit(f"{spec}: expected LABEL=RUN_DIR")
        runs.append((label, Path(run)))
    print(table(runs, args.keys.split(","), args.steps, args.window))


if __name__ == "__main__":
    main()
