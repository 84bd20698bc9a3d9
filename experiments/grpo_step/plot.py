"""Plots of `python -m posttrain.bench grpo_step` results: the per-phase split as stacked bars, and reward curves.

    python experiments/grpo_step/plot.py split experiments/grpo_step/results/speed.jsonl   # -> results/split.png
    python experiments/grpo_step/plot.py rewards experiments/grpo_step/results/curves_seed*.jsonl  # -> rewards.png
    python experiments/grpo_step/plot.py table experiments/grpo_step/results/curves_seed*.jsonl    # markdown rows
    python experiments/grpo_step/plot.py heldout experiments/grpo_step/results/maketrain_t1_seed*.jsonl  # accuracy
    python experiments/grpo_step/plot.py seeds experiments/grpo_step/results/maketrain_default_seed*.jsonl  # tests

`split`: one bar per path (the anchor `trl`, `posttrain`, `posttrain:<variant>`), seconds per optimizer step split
into the step timer's phases, the ratio to the anchor above each bar. `rewards`: each path's per-step reward as a
5-step moving mean (solid: the mean over seeds and rounds; shaded: the 10th-90th percentile over them, or one
dashed line each under 5). `heldout` (records of `--heldout N` runs): held-out accuracy before/after with 95%
bootstrap CIs over problems, and each path's after-training accuracy minus the anchor's of the same seed, paired
over problems. `seeds`: per seed the 30-step mean reward and held-out gain of each path, with seed-level tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from posttrain.analysis import save_figure
from posttrain.analysis.stats import bootstrap_ci
from posttrain.bench.step_timer import PHASES

COLORS = {"trl": "tab:gray", "posttrain": "tab:blue"}


def read_records(path: str | Path) -> list[dict]:
    """The bench's finished records in one output file (not its progress lines, nor failed paths)."""
    recs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]
    return [r for r in recs if r.get("bench") == "grpo_step" and "error" not in r]


def records(files: list[str]) -> list[dict]:
    return prepare([r for f in files for r in read_records(f)])


def prepare(recs: list[dict]) -> list[dict]:
    """The records of some files as the commands compare them: posttrain with --set overrides a path of its own,
    a path re-run on a seed counted once. Changes `path` in place."""
    out = []
    for r in recs:  # posttrain with --set overrides: a variant of its own
        if r["path"] != "trl" and r.get("set"):
            r["path"] += "[" + ",".join(r["set"]) + "]"
        out.append(r)
    seen: set[tuple] = set()  # a path re-run on a seed (the anchor beside each variant) counts once
    unique = []
    for r in out:
        key = (r["path"], r.get("seed"), r.get("steps"), r.get("batch"))
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


def plot_split(recs: list[dict], path: Path, dpi: int = 110) -> Path:
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(recs), 4.2))
    names = [r["path"] + ("" if r.get("seed") is None else f"\nseed {r['seed']}") for r in recs]
    bottom = [0.0] * len(recs)
    for phase in PHASES:
        vals = [r["split_s"][phase] for r in recs]
        ax.bar(names, vals, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, r in enumerate(recs):
        ratio = f"\n{r['ratio_vs_trl']:.2f}x trl" if "ratio_vs_trl" in r else ""
        ax.text(i, bottom[i], f"{r['step_s']:.2f} s{ratio}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds per optimizer step")
    r0 = recs[0]
    ax.set_title(f"GRPO step, {r0['model']}, {r0['train']}, batch {r0['batch']}, {r0['completion_length']} tokens")
    ax.set_ylim(0, max(bottom) * 1.2)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path, dpi=dpi)


def moving_mean(xs: list[float], window: int) -> list[float]:
    return [statistics.fmean(xs[max(0, i - window + 1) : i + 1]) for i in range(len(xs))]


def plot_rewards(recs: list[dict], path: Path, window: int = 5, dpi: int = 110) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    by_path: dict[str, list[list[float]]] = {}
    for r in recs:
        for curve in r.get("rewards", []):
            by_path.setdefault(r["path"], []).append(curve)
    for i, (name, curves) in enumerate(sorted(by_path.items())):
        color = COLORS.get(name, f"C{i + 2}")
        n = min(len(c) for c in curves)
        smooth = [moving_mean(c[:n], window) for c in curves]
        steps = range(1, n + 1)
        if len(curves) >= 5:  # the seed-to-seed spread: 10th-90th percentile of the seeds' smoothed curves
            qs = [statistics.quantiles([c[s] for c in smooth], n=10, method="inclusive") for s in range(n)]
            ax.fill_between(steps, [q[0] for q in qs], [q[-1] for q in qs], color=color, alpha=0.18, lw=0)
        else:
            for c in smooth:
                ax.plot(steps, c, color=color, alpha=0.45, lw=0.9, ls="--")
        mean = moving_mean([statistics.fmean(c[s] for c in curves) for s in range(n)], window)
        ax.plot(steps, mean, color=color, lw=2.2, label=f"{name}: mean of {len(curves)} seeds")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"reward, {window}-step moving mean")
    ax.set_title("mean over seeds; shaded: 10th-90th percentile over seeds (dashed: each seed, < 5 seeds)")
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=dpi)


def seed_comparison(recs: list[dict], early_steps: int = 30) -> str:
    """Seed-level comparison of each path with the anchor: per seed the mean reward of the first `early_steps`
    steps and the held-out gain; then the tests (two-sample: Welch's t, Mann-Whitney U; paired by seed: t, Wilcoxon,
    and the sign test on the early-reward difference)."""
    from scipy import stats

    by = {(r["path"], r.get("seed")): r for r in recs}
    anchor_seeds = sorted(seed for path, seed in by if path == "trl")
    lines = []
    for name in sorted({path for path, _ in by if path != "trl"}):
        seeds = [s for s in anchor_seeds if (name, s) in by]
        early = {p: [statistics.fmean(by[p, s]["rewards"][0][:early_steps]) for s in seeds] for p in ("trl", name)}
        gain = {p: [by[p, s]["heldout_gain"] for s in seeds] for p in ("trl", name)}
        lines += [
            f"## {name} vs trl, {len(seeds)} seeds",
            "",
            f"| seed | {early_steps}-step reward trl | {name} | held-out gain trl | {name} |",
            "|---|---|---|---|---|",
        ]
        for i, s in enumerate(seeds):
            lines.append(
                f"| {s} | {early['trl'][i]:.3f} | {early[name][i]:.3f} | {gain['trl'][i]:+.3f} | {gain[name][i]:+.3f} |"
            )
        lines.append("")
        if len(seeds) < 3:
            continue
        for label, v in ((f"{early_steps}-step mean reward", early), ("held-out gain", gain)):
            a, b = v["trl"], v[name]
            diff = [y - x for x, y in zip(a, b, strict=True)]
            lower = sum(d < 0 for d in diff)
            higher = sum(d > 0 for d in diff)
            lines.append(
                f"- {label}: trl {statistics.fmean(a):.3f} +- {statistics.stdev(a):.3f}, {name} "
                f"{statistics.fmean(b):.3f} +- {statistics.stdev(b):.3f} (mean +- sd over seeds); difference "
                f"{statistics.fmean(diff):+.3f}; Welch p = {stats.ttest_ind(a, b, equal_var=False).pvalue:.3f}, "
                f"Mann-Whitney p = {stats.mannwhitneyu(a, b).pvalue:.3f}; paired t p = "
                f"{stats.ttest_rel(a, b).pvalue:.3f}, Wilcoxon p = {stats.wilcoxon(a, b).pvalue:.3f}; {name} lower "
                f"on {lower}, higher on {higher} of {len(diff)} seeds (sign test p = "
                f"{stats.binomtest(lower, lower + higher).pvalue:.3f})"
            )
        lines.append("")
    return "\n".join(lines)


def table(recs: list[dict]) -> str:
    """Markdown rows: path, seconds per step and its split, CPU seconds, tokens/s, peak RSS, ratios to the anchor."""
    head = [
        "file/seed",
        "path",
        "s/step",
        *PHASES,
        "CPU s/step",
        "gen tok/s",
        "peak RSS MiB",
        "(b)/(a) wall",
        "(b)/(a) CPU",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in recs:
        cells = [str(r.get("seed")), r["path"], f"{r['step_s']:.2f}", *(f"{r['split_s'][p]:.2f}" for p in PHASES)]
        cells += [f"{r['cpu_s']:.2f}", f"{r['gen_tokens_per_s']:.1f}", f"{r['peak_rss_mib']:.0f}"]
        cells += [f"{r.get('ratio_vs_trl', float('nan')):.3f}", f"{r.get('cpu_ratio_vs_trl', float('nan')):.3f}"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def heldout_table(recs: list[dict]) -> str:
    """Markdown rows: seed, path, held-out accuracy before -> after [95% CI], gain, after minus the anchor's."""
    rows = [
        "| seed | path | s/step | held-out before | held-out after [95% CI] | gain | after - trl's, paired [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    anchor = {r.get("seed"): r["heldout_correct"] for r in recs if r["path"] == "trl" and "heldout_correct" in r}
    for r in recs:
        if "heldout_correct" not in r:
            continue
        lo, hi = bootstrap_ci(r["heldout_correct"])
        cells = [str(r.get("seed")), r["path"], f"{r['step_s']:.2f}", f"{r['heldout_acc_before']:.3f}"]
        cells += [f"{r['heldout_acc_after']:.3f} [{lo:.3f}, {hi:.3f}]", f"{r['heldout_gain']:+.3f}"]
        ref = anchor.get(r.get("seed"))
        if ref is not None and r["path"] != "trl":
            diff = [a - b for a, b in zip(r["heldout_correct"], ref, strict=True)]
            dlo, dhi = bootstrap_ci(diff)
            cells.append(f"{sum(diff) / len(diff):+.3f} [{dlo:+.3f}, {dhi:+.3f}]")
        else:
            cells.append("-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("split", "rewards", "table", "heldout", "seeds"))
    p.add_argument("files", nargs="+")
    p.add_argument("--out", help="PNG path (default: <first file's folder>/<kind>.png)")
    args = p.parse_args(argv)
    recs = records(args.files)
    if args.kind in ("table", "heldout", "seeds"):
        print({"table": table, "heldout": heldout_table, "seeds": seed_comparison}[args.kind](recs))
        return
    out = Path(args.out) if args.out else Path(args.files[0]).parent / f"{args.kind}.png"
    print((plot_split if args.kind == "split" else plot_rewards)(recs, out))


if __name__ == "__main__":
    main()
