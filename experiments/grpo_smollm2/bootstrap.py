"""Held-out accuracy before/after with 95% bootstrap CIs over problems, from run dirs' heldout_*.jsonl.

python experiments/grpo_smollm2/bootstrap.py experiments/grpo_smollm2/results/run_*
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def correct(run: Path, tag: str) -> list[float]:
    return [json.loads(ln)["correct"] for ln in (run / f"heldout_{tag}.jsonl").read_text().splitlines()]


def ci(xs: list[float], n_boot: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(xs, k=len(xs))) / len(xs) for _ in range(n_boot))
    return means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1]


def main(runs: list[str]) -> None:
    print("| run | n | before | after | gain (95% CI, paired) |")
    print("|---|---|---|---|---|")
    for run in map(Path, runs):
        before, after = correct(run, "before"), correct(run, "after")
        gain = [a - b for a, b in zip(after, before)]
        lo, hi = ci(gain)
        mb, ma = sum(before) / len(before), sum(after) / len(after)
        print(f"| {run.name} | {len(before)} | {mb:.3f} | {ma:.3f} | {ma - mb:+.3f} ({lo:+.3f}, {hi:+.3f}) |")


if __name__ == "__main__":
    main(sys.argv[1:])
