"""Table and plot of issue 25's arms: held-out accuracy gain per seed, mean with a 95% CI over seeds, the paired
difference from the preset on the same seeds, and the accuracy after training on addition and on subtraction.

    python experiments/grpo_objectives/report.py [--arms a,b,...] [--plot experiments/grpo_objectives/gains.png]

Reads results/<arm>/seed<S>/summary.json (written by run.py). CI: mean +- t(0.975, n-1) * sd / sqrt(n).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ARMS, MAKE_TRAIN_ARM, base_arm

RESULTS = Path(__file__).resolve().parent / "results"
FULL_FT_GAIN = 0.28  # full fine-tuning's mean gain over seeds 0-2 (experiments/grpo_smollm2), the bar


def load() -> dict[str, dict[int, dict]]:
    runs: dict[str, dict[int, dict]] = {}
    for summary in sorted(RESULTS.glob("*/seed*/summary.json")):
        arm, seed = summary.parent.parent.name, int(summary.parent.name.removeprefix("seed"))
        runs.setdefault(arm, {})[seed] = json.loads(summary.read_text())
    return runs


def by_operation(arm: str, seeds: list[int]) -> dict[str, float]:
    """Held-out accuracy after training per operation ("+", "-"), over the seeds' heldout_after.jsonl."""
    right: dict[str, list[float]] = {"+": [], "-": []}
    for seed in seeds:
        path = RESULTS / arm / f"seed{seed}" / "heldout_after.jsonl"
        for row in map(json.loads, path.read_text().splitlines() if path.exists() else []):
            question = row["prompt"][-1]["content"]
            op = "-" if " - " in question else "+"
            right[op].append(float(row["correct"]))
    return {op: statistics.fmean(v) if v else math.nan for op, v in right.items()}


def ci(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", help="comma list (default: all with results)")
    p.add_argument("--plot", default=str(Path(__file__).resolve().parent / "gains.png"))
    p.add_argument("--plot-min-seeds", type=int, default=3, help="arms with fewer seeds are left out of the plot")
    args = p.parse_args()
    runs = load()
    arms = args.arms.split(",") if args.arms else [a for a in ARMS if a in runs] + [a for a in runs if a not in ARMS]
    gains = {
        arm: {s: r["heldout_acc_after"] - r["heldout_acc_before"] for s, r in sorted(runs.get(arm, {}).items())}
        for arm in arms
    }
    print(
        "| arm | seeds | after (mean) | after: + / - | gain mean [95% CI] | min gain | vs its base, paired [95% CI] "
        "| s per run |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for arm in arms:
        g = gains[arm]
        if not g:
            continue
        mean, lo, hi = ci(list(g.values()))
        after = statistics.fmean(runs[arm][s]["heldout_acc_after"] for s in g)
        base_name = base_arm(arm)
        base = gains.get(base_name) or {
            s: r["heldout_acc_after"] - r["heldout_acc_before"] for s, r in runs.get(base_name, {}).items()
        }
        shared = [s for s in g if s in base]
        paired = "—"
        if arm != "preset" and shared:
            d, dlo, dhi = ci([g[s] - base[s] for s in shared])
            paired = f"{d:+.3f} [{dlo:+.3f}, {dhi:+.3f}] vs {base_name} (n={len(shared)})"
        runtime = statistics.fmean(runs[arm][s]["runtime_s"] for s in g)
        seeds_ = ",".join(str(s) for s in g)
        ops = by_operation(arm, list(g))
        print(
            f"| {arm} | {seeds_} | {after:.3f} | {ops['+']:.2f} / {ops['-']:.2f} | "
            f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] | {min(g.values()):+.3f} | "
            f"{paired} | {runtime:.0f} |"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [a for a in arms if len(gains[a]) >= args.plot_min_seeds]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(shown) + 1.5))
    for i, arm in enumerate(shown):
        values = list(gains[arm].values())
        mean, lo, hi = ci(values)
        ax.scatter(values, [i] * len(values), color="0.5", s=14, zorder=3)
        colour = "C1" if arm == MAKE_TRAIN_ARM else "C0"  # the make-train preset in orange
        ax.errorbar([mean], [i], xerr=[[mean - lo], [hi - mean]], fmt="o", color=colour)
    ax.axvline(0, color="0.8", lw=1)
    ax.axvline(FULL_FT_GAIN, color="C2", lw=1, ls="--", label=f"full fine-tuning, +{FULL_FT_GAIN:.2f}")
    ax.set_yticks(range(len(shown)), shown)
    ax.invert_yaxis()
    ax.set_xlabel("held-out accuracy gain (200 problems)")
    ax.set_title(
        "GRPO + LoRA on SmolLM2-135M, make-train configuration\n"
        f"gain per seed (grey), mean, 95% CI; arms with >= {args.plot_min_seeds} seeds; orange: the preset",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
