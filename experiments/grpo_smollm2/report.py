"""Tables and reward curves of experiments/grpo_smollm2 from the CSV tables in results/.

    python experiments/grpo_smollm2/report.py              # results/*.csv -> results/report.md, reward_curves.png
    python experiments/grpo_smollm2/report.py --collect    # first the CSVs from the run folders run.sh fills
    python experiments/grpo_smollm2/report.py --collect DIR --results OUT

`--collect [DIR]` reads the run folders under DIR (default results/, where run.sh copies each run's small files:
git-ignored) and writes the tables the report reads:

    runs.csv      one row per run: method (LoRA or not), lr, seed, summary.json's runtime and reward means, the
                  /usr/bin/time -v fields (wall, user, sys, peak RSS), the 1-minute load at start and end, commit
    steps.csv     one row per (run, step) of metrics.jsonl: reward, completion length, entropy, grad norm, step time
    heldout.csv   one row per (run, held-out problem): the question, its operation, correct before / after training
                  (the math checker on the last number), and the lenient reading ("= <answer>" anywhere)

Held-out accuracy CIs of a run are percentile bootstraps over the 200 held-out problems (10,000 resamples, fixed
seed). Over the seeds of a condition they resample seeds and problems together (`posttrain.analysis.stats.
seeds_items_ci` on the [runs, problems] table), so they carry the seed-to-seed spread as well as the choice of
problems (until 2026-12-02 the seeds were averaged per problem first, which left the spread out); the difference
between two conditions resamples the problems once for both and each condition's seeds on their own
(`difference_ci`). "Gain" is paired: the same problem before and after. Seconds per step are the mean of
metrics.jsonl's `step_time`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from posttrain.analysis import load_summaries
from posttrain.analysis.stats import difference_ci, seeds_items_ci
from posttrain.analysis.tables import write_csv as _write_csv

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/grpo_smollm2/report.py"
CONFIG_KEYS = ("model.lora.enabled", "trainer.lr", "seed", "data.seed", "trainer.max_steps")
CURVES = ("reward", "completions/mean_length", "entropy", "grad_norm")
STEP_COLUMNS = ("run", "step", *CURVES, "step_time")
TIME_FIELDS = {  # runs.csv column: the /usr/bin/time -v label
    "wall": "Elapsed (wall clock) time (h:mm:ss or m:ss)",
    "user_s": "User time (seconds)",
    "sys_s": "System time (seconds)",
    "max_rss_kb": "Maximum resident set size (kbytes)",
}
RUN_COLUMNS = (
    "run",
    "lora",
    "lr",
    "seed",
    "data_seed",
    "max_steps",
    "runtime_s",
    "reward_first5_mean",
    "reward_last5_mean",
    *TIME_FIELDS,
    "load_start",
    "load_end",
    "commit",
)
HELDOUT_COLUMNS = (
    "run",
    "problem",
    "question",
    "op",
    "correct_before",
    "correct_after",
    "lenient_before",
    "lenient_after",
)
N_BOOT = 10_000
DPI = 60  # reward_curves.png ~180 kB (save_figure's default 110 dpi made it 369 kB)
LAST = 20  # the pilot picks full fine-tuning's lr by the mean training reward over the last LAST steps


# --- collect: the run folders -> the CSV tables -------------------------------------------------------------------


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _num(value: object) -> str:
    """A CSV cell: '' for a missing value, integers without '.0', other floats exactly (repr)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _lenient(row: dict) -> float:
    """1 where the checker says correct or the right number follows an "=" anywhere in the reply (the checker
    reads the last number only, so "18 + 54 = 72 I added 1" counts as wrong there)."""
    found = re.search(rf"=\s*{re.escape(row['answer'])}(?!\d)", row["completion"]) is not None
    return max(float(row["correct"]), float(found))


def _question(prompt: list[dict]) -> str:
    text = prompt[-1]["content"]
    m = re.fullmatch(r"What is (.+)\? Answer with just the number\.", text)
    return m.group(1) if m else text


def collect(raw: Path, out: Path) -> list[Path]:
    """runs.csv, steps.csv and heldout.csv of the run folders under `raw`, in `out`."""
    summaries = load_summaries(raw, config=CONFIG_KEYS)
    if summaries.empty:
        sys.exit(f"no runs under {raw}")
    runs, steps, heldout = [], [], []
    for _, s in summaries.iterrows():
        d = Path(s["run_dir"])
        text = (d / "time_v.txt").read_text()
        time = {k: re.search(rf"{re.escape(label)}: (.+)", text).group(1).strip() for k, label in TIME_FIELDS.items()}
        load = [ln.split()[2] for ln in (d / "loadavg.txt").read_text().splitlines()]
        commit = (d / "commit.txt").read_text().split()[1] if (d / "commit.txt").is_file() else ""
        runs.append(
            [s["run"], _num(bool(s["model.lora.enabled"])), repr(float(s["trainer.lr"])), s["seed"], s["data.seed"]]
            + [s["trainer.max_steps"], *(_num(s[k]) for k in ("runtime_s", "reward_first5_mean", "reward_last5_mean"))]
            + [*time.values(), *load, commit]
        )
        for rec in _jsonl(d / "metrics.jsonl"):
            steps.append([s["run"], rec["step"], *(_num(rec.get(k)) for k in (*CURVES, "step_time"))])
        before, after = _jsonl(d / "heldout_before.jsonl"), _jsonl(d / "heldout_after.jsonl")
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            op = "+" if " + " in json.dumps(b["prompt"]) else "-"
            heldout.append(
                [s["run"], i, _question(b["prompt"]), op, _num(float(b["correct"])), _num(float(a["correct"]))]
                + [_num(_lenient(b)), _num(_lenient(a))]
            )
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "runs.csv", RUN_COLUMNS, runs)
    _write_csv(out / "steps.csv", STEP_COLUMNS, steps)
    _write_csv(out / "heldout.csv", HELDOUT_COLUMNS, heldout)
    return [out / "runs.csv", out / "steps.csv", out / "heldout.csv"]


# --- report: the CSV tables -> report.md and the plot ---------------------------------------------------------------


def read_tables(results: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame]]:
    """(one row per run with its derived columns, one row per logged step, {run: its held-out problems})."""
    runs = pd.read_csv(results / "runs.csv", dtype={"wall": str, "load_start": str, "load_end": str})
    steps = pd.read_csv(results / "steps.csv")
    heldout = pd.read_csv(results / "heldout.csv", dtype={"question": str})
    runs["method"] = np.where(runs["lora"].astype(bool), "LoRA r16", "full FT")
    runs = runs.rename(columns={"lr": "trainer.lr"})
    derived = []
    for _, r in runs.iterrows():
        wall = 0.0
        for part in r["wall"].split(":"):
            wall = wall * 60 + float(part)
        mine = steps[steps["run"] == r["run"]]
        step_time = [float(x) for x in mine["step_time"] if not pd.isna(x)]
        rewards = [float(x) for x in mine["reward"] if not pd.isna(x)][-LAST:]
        derived.append(
            {
                "wall_s": wall,
                "cpu_s": float(r["user_s"]) + float(r["sys_s"]),
                "rss_gib": int(r["max_rss_kb"]) / 2**20,
                "s_per_step": float(np.mean(step_time)),
                "reward_last": float(np.mean(rewards)),
                "load": f"{r['load_start']} -> {r['load_end']}",
            }
        )
    df = pd.concat([runs.reset_index(drop=True), pd.DataFrame(derived)], axis=1)
    df = df.sort_values(["method", "trainer.lr", "seed"], ascending=[False, False, True])
    problems = {run: g.sort_values("problem").reset_index(drop=True) for run, g in heldout.groupby("run", sort=False)}
    return df, steps, problems


def boot_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of `x` (resampling its entries)."""
    idx = np.random.default_rng(seed).integers(0, len(x), size=(N_BOOT, len(x)))
    lo, hi = np.percentile(x[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def row(cells: list) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def fmt_ci(mean: float, ci: tuple[float, float], sign: str = "") -> str:
    return f"{mean:{sign}.3f} ({ci[0]:{sign}.3f}, {ci[1]:{sign}.3f})"


def runs_table(df: pd.DataFrame, problems: dict[str, pd.DataFrame]) -> str:
    head = (
        "| run | method | lr | seed | before | after (95% CI) | gain, paired (95% CI) | reward first5 / last5 / last20 "
        "| s/step | train s | wall s | CPU s | peak RSS GiB | load 1-min start -> end |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for _, r in df.iterrows():
        before = problems[r["run"]]["correct_before"].to_numpy(dtype=float)
        after = problems[r["run"]]["correct_after"].to_numpy(dtype=float)
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


def _runs_table(problems: dict[str, pd.DataFrame], names: pd.Series, column: str) -> np.ndarray:
    """[runs, problems] of `column` for the runs `names`."""
    return np.stack([problems[n][column].to_numpy(dtype=float) for n in names])


def summary_table(groups: list[tuple[str, pd.DataFrame]], problems: dict[str, pd.DataFrame]) -> str:
    lines = [
        "| condition | seeds | before | after, mean (95% CI) | after per seed | gain, paired (95% CI) | s/step "
        "| wall s | peak RSS GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in groups:
        before = _runs_table(problems, g["run"], "correct_before")
        after = _runs_table(problems, g["run"], "correct_after")
        cells = [
            name,
            ", ".join(map(str, g["seed"])),
            f"{before.mean():.3f}",
            fmt_ci(*_two_way(after)),
            ", ".join(f"{problems[n]['correct_after'].to_numpy(dtype=float).mean():.3f}" for n in g["run"]),
            fmt_ci(*_two_way(after - before), "+"),
            f"{g['s_per_step'].mean():.2f}",
            f"{g['wall_s'].mean():.0f}",
            f"{g['rss_gib'].max():.2f}",
        ]
        lines.append(row(cells))
    if len(groups) == 2:
        (na, ga), (nb, gb) = groups
        a = _runs_table(problems, ga["run"], "correct_after")
        b = _runs_table(problems, gb["run"], "correct_after")
        d, (lo, hi) = difference_ci(a, b, n_boot=10_000)
        lines.append(f"\nafter: {na} minus {nb}, paired over problems, seeds resampled: {fmt_ci(d, (lo, hi), '+')}")
    return "\n".join(lines)


def _two_way(table: np.ndarray) -> tuple[float, tuple[float, float]]:
    mean, (lo, hi) = seeds_items_ci(table, n_boot=10_000)
    return mean, (lo, hi)


def by_operation(groups: list[tuple[str, pd.DataFrame]], problems: dict[str, pd.DataFrame]) -> str:
    """Held-out accuracy split by operation (+ / -), mean over the seeds of each condition, with the lenient
    reading ("= <answer>" anywhere in the reply) beside the checker's."""
    lines = [
        "| condition | op | n | before | after | before, lenient | after, lenient |",
        "|---|---|---|---|---|---|---|",
    ]
    columns = ("correct_before", "correct_after", "lenient_before", "lenient_after")
    for name, g in groups:
        plus = (problems[g["run"].iloc[0]]["op"] == "+").to_numpy()
        acc = {c: _runs_table(problems, g["run"], c).mean(axis=0) for c in columns}
        for op, mask in (("+", plus), ("-", ~plus), ("all", np.ones_like(plus))):
            cells = " | ".join(f"{acc[c][mask].mean():.3f}" for c in columns)
            lines.append(f"| {name} | {op} | {mask.sum()} | {cells} |")
    return "\n".join(lines)


def write_curves(df: pd.DataFrame, steps: pd.DataFrame, png: Path) -> Path:
    from posttrain.analysis import plot_curves, save_figure

    main = {r for _, g in conditions(df) for r in g["run"]}
    config = df[["run", "lora", "trainer.lr", "seed"]]
    curves = steps[steps["run"].isin(main)].merge(config, on="run", how="left")
    curves["method"] = np.where(curves["lora"].astype(bool), "lora", "full")
    curves = curves.sort_values(["method", "seed", "step"], ascending=[False, True, True])
    fig = plot_curves(curves, CURVES, by=["method", "trainer.lr", "seed"], window=5, ncols=2)
    fig.suptitle("GRPO on SmolLM2-135M, data=add: trailing 5-step means", y=1.01)
    return save_figure(fig, png, dpi=DPI)


def report(results: Path, out: Path, plots: bool = True) -> Path:
    df, steps, problems = read_tables(results)
    groups = conditions(df)
    text = [f"<!-- {COMMAND} -->", ""]
    text += ["## Per condition (3 seeds)", "", summary_table(groups, problems)]
    text += ["", "## By operation", "", by_operation(groups, problems)]
    text += ["", "## Every run", "", runs_table(df, problems), ""]
    out.mkdir(parents=True, exist_ok=True)
    if groups:
        text += ["![reward curves](reward_curves.png)", ""]
        if plots:
            write_curves(df, steps, out / "reward_curves.png")
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="the CSV tables (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md and reward_curves.png go (default: --results)")
    ap.add_argument("--collect", nargs="?", const=HERE / "results", type=Path, help="run folders to collect first")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    path = report(args.results, args.out or args.results, plots=not args.no_plots)
    print(path.read_text())


if __name__ == "__main__":
    main()
