"""Tables and reward curves of experiments/grpo_smollm2 from its results/ folder alone (what run.sh copied there).

    python experiments/grpo_smollm2/report.py            # prints the markdown tables, writes reward_curves.png
    python experiments/grpo_smollm2/report.py --results DIR --png OUT.png

Held-out accuracy CIs are percentile bootstraps over the 200 held-out problems (10,000 resamples, fixed seed).
Over seeds, each problem's correctness is first averaged over the runs of a condition, then problems are
resampled: the CI covers the choice of problems, not the seed-to-seed spread (the per-seed values show that).
"Gain" is paired: the same problem before and after. Timing and memory come from `/usr/bin/time -v`
(time_v.txt), seconds per step from metrics.jsonl's `step_time`, load averages from loadavg.txt.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from posttrain.analysis import load_runs, load_summaries, plot_curves, save_figure

HERE = Path(__file__).resolve().parent
CONFIG_KEYS = ("model.lora.enabled", "trainer.lr", "seed", "data.seed", "trainer.max_steps")
CURVES = ("reward", "completions/mean_length", "entropy", "grad_norm")
N_BOOT = 10_000
LAST = 20  # the pilot picks full fine-tuning's lr by the mean training reward over the last LAST steps


def correct(run_dir: Path, tag: str) -> np.ndarray:
    rows = [json.loads(ln) for ln in (run_dir / f"heldout_{tag}.jsonl").read_text().splitlines() if ln.strip()]
    return np.array([float(r["correct"]) for r in rows])


def boot_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of `x` (resampling its entries)."""
    idx = np.random.default_rng(seed).integers(0, len(x), size=(N_BOOT, len(x)))
    lo, hi = np.percentile(x[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def time_v(run_dir: Path) -> dict[str, float]:
    """Wall seconds, user+sys CPU seconds and peak RSS (GiB) from GNU time's verbose output."""
    text = (run_dir / "time_v.txt").read_text()

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (.+)", text).group(1).strip()

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return {"wall_s": wall, "cpu_s": cpu, "rss_gib": int(field("Maximum resident set size (kbytes)")) / 2**20}


def loadavg(run_dir: Path) -> str:
    """1-minute load average at start -> end of the run."""
    lines = (run_dir / "loadavg.txt").read_text().splitlines()
    return " -> ".join(ln.split()[2] for ln in lines)


def per_run(results: Path) -> pd.DataFrame:
    s = load_summaries(results, config=CONFIG_KEYS)
    s["method"] = np.where(s["model.lora.enabled"].astype(bool), "LoRA r16", "full FT")
    rows = []
    for _, r in s.iterrows():
        d = Path(r["run_dir"])
        recs = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines() if ln.strip()]
        steps = [x["step_time"] for x in recs if x.get("step_time") is not None]
        last = [x["reward"] for x in recs if x.get("reward") is not None][-LAST:]
        rows.append({**time_v(d), "s_per_step": float(np.mean(steps)), "reward_last": float(np.mean(last))})
        rows[-1]["load"] = loadavg(d)
    return pd.concat([s.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


def row(cells: list) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def fmt_ci(mean: float, ci: tuple[float, float], sign: str = "") -> str:
    return f"{mean:{sign}.3f} ({ci[0]:{sign}.3f}, {ci[1]:{sign}.3f})"


def runs_table(df: pd.DataFrame) -> str:
    head = (
        "| run | method | lr | seed | before | after (95% CI) | gain, paired (95% CI) | reward first5 / last5 / last20 "
        "| s/step | train s | wall s | CPU s | peak RSS GiB | load 1-min start -> end |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for _, r in df.iterrows():
        d = Path(r["run_dir"])
        before, after = correct(d, "before"), correct(d, "after")
        gain = after - before
        cells = [
            r["run"],
            r["method"],
            f"{r['trainer.lr']:g}",
            r["seed"],
            f"{before.mean():.3f}",
            fmt_ci(after.mean(), boot_ci(after)),
            fmt_ci(gain.mean(), boot_ci(gain), "+"),
            f"{r['reward_first5_mean']:.3f} / {r['reward_last5_mean']:.3f} / {r['reward_last']:.3f}",
            f"{r['s_per_step']:.2f}",
            f"{r['runtime_s']:.0f}",
            f"{r['wall_s']:.0f}",
            f"{r['cpu_s']:.0f}",
            f"{r['rss_gib']:.2f}",
            r["load"],
        ]
        lines.append(row(cells))
    return "\n".join(lines)


def conditions(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(method, lr) groups run with 3 or more seeds: the compared conditions (the rest are pilots)."""
    out = []
    for (method, lr), g in df.groupby(["method", "trainer.lr"], sort=False):
        if g["seed"].nunique() >= 3:
            out.append((f"{method}, lr {lr:g}", g.sort_values("seed")))
    return out


def summary_table(groups: list[tuple[str, pd.DataFrame]]) -> str:
    lines = [
        "| condition | seeds | before | after, mean (95% CI) | after per seed | gain, paired (95% CI) | s/step "
        "| wall s | peak RSS GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in groups:
        dirs = [Path(d) for d in g["run_dir"]]
        before = np.mean([correct(d, "before") for d in dirs], axis=0)
        after = np.mean([correct(d, "after") for d in dirs], axis=0)
        gain = after - before
        cells = [
            name,
            ", ".join(map(str, g["seed"])),
            f"{before.mean():.3f}",
            fmt_ci(after.mean(), boot_ci(after)),
            ", ".join(f"{correct(d, 'after').mean():.3f}" for d in dirs),
            fmt_ci(gain.mean(), boot_ci(gain), "+"),
            f"{g['s_per_step'].mean():.2f}",
            f"{g['wall_s'].mean():.0f}",
            f"{g['rss_gib'].max():.2f}",
        ]
        lines.append(row(cells))
    if len(groups) == 2:
        (na, ga), (nb, gb) = groups
        a = np.mean([correct(Path(d), "after") for d in ga["run_dir"]], axis=0)
        b = np.mean([correct(Path(d), "after") for d in gb["run_dir"]], axis=0)
        lines.append(f"\nafter: {na} minus {nb}, paired over problems: {fmt_ci((a - b).mean(), boot_ci(a - b), '+')}")
    return "\n".join(lines)


def lenient(run_dir: Path, tag: str) -> np.ndarray:
    """1 where the checker says correct or the right number follows an "=" anywhere in the reply (the checker
    reads the last number only, so "18 + 54 = 72 I added 1" counts as wrong there)."""
    rows = [json.loads(ln) for ln in (run_dir / f"heldout_{tag}.jsonl").read_text().splitlines() if ln.strip()]
    found = [re.search(rf"=\s*{re.escape(r['answer'])}(?!\d)", r["completion"]) is not None for r in rows]
    return np.maximum(correct(run_dir, tag), np.array(found, dtype=float))


def by_operation(groups: list[tuple[str, pd.DataFrame]]) -> str:
    """Held-out accuracy split by operation (+ / -), mean over the seeds of each condition, with the lenient
    reading ("= <answer>" anywhere in the reply) beside the checker's."""
    lines = [
        "| condition | op | n | before | after | before, lenient | after, lenient |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in groups:
        dirs = [Path(d) for d in g["run_dir"]]
        prompts = [json.loads(ln)["prompt"] for ln in (dirs[0] / "heldout_before.jsonl").read_text().splitlines()]
        plus = np.array([" + " in json.dumps(p) for p in prompts])
        acc = {
            (f, tag): np.mean([f(d, tag) for d in dirs], axis=0)
            for f in (correct, lenient)
            for tag in ("before", "after")
        }
        for op, mask in (("+", plus), ("-", ~plus), ("all", np.ones_like(plus))):
            cells = " | ".join(f"{acc[f, t][mask].mean():.3f}" for f in (correct, lenient) for t in ("before", "after"))
            lines.append(f"| {name} | {op} | {mask.sum()} | {cells} |")
    return "\n".join(lines)


def write_curves(results: Path, df: pd.DataFrame, png: Path) -> None:
    curves = load_runs(results, config=CONFIG_KEYS)
    main = {r for _, g in conditions(df) for r in g["run"]}
    curves = curves[curves["run"].isin(main)].copy()
    curves["method"] = np.where(curves["model.lora.enabled"].astype(bool), "lora", "full")
    curves = curves.sort_values(["method", "seed", "step"], ascending=[False, True, True])
    fig = plot_curves(curves, CURVES, by=["method", "trainer.lr", "seed"], window=5, ncols=2)
    fig.suptitle("GRPO on SmolLM2-135M, data=add: trailing 5-step means", y=1.01)
    save_figure(fig, png)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--png", type=Path, default=HERE / "reward_curves.png")
    args = ap.parse_args()
    df = per_run(args.results).sort_values(["method", "trainer.lr", "seed"], ascending=[False, False, True])
    groups = conditions(df)
    print("## Per condition (3 seeds)\n")
    print(summary_table(groups))
    print("\n## By operation\n")
    print(by_operation(groups))
    print("\n## Every run\n")
    print(runs_table(df))
    if groups:
        write_curves(args.results, df, args.png)
        print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
