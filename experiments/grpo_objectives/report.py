"""Table and plot of issue 25's arms: held-out accuracy gain per seed, mean with a 95% CI over seeds and problems,
the paired difference from the preset on the same seeds, and the accuracy after training on addition and on
subtraction.

    python experiments/grpo_objectives/report.py [--arms a,b,...] [--plot experiments/grpo_objectives/gains.png]
    python experiments/grpo_objectives/report.py --collect     # after run.py: the run dirs -> the three CSV files

Reads only results/runs.csv (one row per arm x seed: the run's held-out accuracy before and after training and its
training runtime, from its summary.json; `commit`: the last commit that added or changed that summary.json, where the
run's raw files are), results/heldout.csv (one row per run x held-out problem: `run` as in runs.csv, `item` the
problem's index in heldout_*.jsonl, and whether the reply after training was right) and results/problems.csv (one row
per held-out problem: `item`, its question, its operation, + or -, and whether the base model's reply before training
was right: every run starts from that model and is asked the same problems, and collect refuses a run whose
questions or replies before training differ). Writes the table
to stdout and results/report.md, and the plot. `--collect` first builds the CSV files from the run dirs run.py writes
(results/<arm>/seed<S>/summary.json and heldout_{before,after}.jsonl; git ignores them). CI: the seeds x problems
bootstrap of the per-problem gains (`posttrain.analysis.stats.seeds_items_ci`; for the paired column, of the
per-seed, per-problem differences from the base arm), which carries the variance between runs and between the 200
problems (a t-interval over seeds held the problems fixed).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from scipy import stats

from posttrain.analysis.stats import seeds_items_ci
from posttrain.analysis.tables import cell

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ARMS, MAKE_TRAIN_ARM, base_arm

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RUNS_CSV, HELDOUT_CSV, PROBLEMS_CSV, REPORT_MD = "runs.csv", "heldout.csv", "problems.csv", "report.md"
SUMMARY_FIELDS = ("heldout_acc_before", "heldout_acc_after", "runtime_s")  # the summary.json values the report uses
RUN_COLUMNS = ("run", "arm", "seed", *SUMMARY_FIELDS, "commit")
HELDOUT_COLUMNS = ("run", "item", "correct_after")
PROBLEM_COLUMNS = ("item", "question", "operation", "correct_before")
COMMAND = "python experiments/grpo_objectives/report.py"
FULL_FT_GAIN = 0.28  # full fine-tuning's mean gain over seeds 0-2 (experiments/grpo_smollm2), the bar


def operation(question: str) -> str:
    return "-" if " - " in question else "+"


def _answers(path: Path) -> list[tuple[str, float]]:
    """(question, correct) per line of a heldout_*.jsonl; none when the run wrote no such file."""
    rows = map(json.loads, path.read_text().splitlines() if path.exists() else [])
    return [(row["prompt"][-1]["content"], float(row["correct"])) for row in rows]


def _commits(results: Path) -> dict[Path, str]:
    """summary.json -> the last commit that added or changed it (none outside a git checkout, or not committed)."""
    try:
        out = subprocess.run(
            ["git", "log", "--diff-filter=AM", "--format=%x00%h", "--name-only", "--", "."],
            cwd=results,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=results, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    commits: dict[Path, str] = {}
    for block in out.split("\0")[1:]:
        commit, *paths = block.strip().splitlines()
        for path in paths:
            if path.endswith("summary.json"):
                commits.setdefault((Path(top) / path).resolve(), commit)  # newest first: keep the first seen
    return commits


def _kept_rows(results: Path, present: set[tuple[str, int]]) -> dict[tuple[str, int], tuple[dict, list[list[str]]]]:
    """The CSV rows (runs.csv's, heldout.csv's) of the runs already collected whose run dir is not here: run dirs stay
    out of git, so a fresh clone adds new runs to the committed CSVs instead of replacing them."""
    if not (results / RUNS_CSV).is_file():
        return {}
    with (results / RUNS_CSV).open(newline="") as f:
        old = {row["run"]: row for row in csv.DictReader(f)}
    kept = {
        (row["arm"], int(row["seed"])): (row, [])
        for row in old.values()
        if (row["arm"], int(row["seed"])) not in present
    }
    with (results / HELDOUT_CSV).open(newline="") as f:
        for row in csv.DictReader(f):
            key = (old[row["run"]]["arm"], int(old[row["run"]]["seed"]))
            if key in kept:
                kept[key][1].append([row[c] for c in HELDOUT_COLUMNS[1:]])
    return kept


def collect(results: Path = RESULTS) -> tuple[Path, Path, Path]:
    """results/<arm>/seed<S>/ -> results/runs.csv, heldout.csv (runs in the order of their paths) and problems.csv,
    keeping the rows of runs collected before whose run dir is gone. Every run must ask the same problem at each
    item."""
    commits = _commits(results)
    folders = {
        (f.parent.parent.name, int(f.parent.name.removeprefix("seed"))): f for f in results.glob("*/seed*/summary.json")
    }
    kept = _kept_rows(results, set(folders))
    known: dict[int, str] = {}  # item -> the question the collected runs were asked
    base: dict[int, str] = {}  # item -> the base model's reply before training, right or not ("" where none wrote it)
    if kept:
        with (results / PROBLEMS_CSV).open(newline="") as f:
            for row in csv.DictReader(f):
                known[int(row["item"])], base[int(row["item"])] = row["question"], row["correct_before"]
    runs, items, problems = [], [], {}
    for run, key in enumerate(sorted({*folders, *kept}, key=lambda k: (k[0], f"seed{k[1]}"))):
        if key in kept:
            row, rows = kept[key]
            runs.append({**row, "run": run})
            items += [[run, *r] for r in rows]
            continue
        summary = folders[key]
        folder = summary.parent
        values = json.loads(summary.read_text())
        runs.append(
            {"run": run, "arm": key[0], "seed": key[1]}
            | {k: values[k] for k in SUMMARY_FIELDS}
            | {"commit": commits.get(summary.resolve(), "")}
        )
        before, after = _answers(folder / "heldout_before.jsonl"), _answers(folder / "heldout_after.jsonl")
        if before and after and [q for q, _ in before] != [q for q, _ in after]:
            raise ValueError(f"{folder}: heldout_before.jsonl and heldout_after.jsonl ask different problems")
        for item in range(max(len(before), len(after))):
            question = (before or after)[item][0]
            if problems.setdefault(item, question) != question:
                raise ValueError(f"{folder}: held-out problem {item} is not the other runs' ({question!r})")
            if known.get(item, question) != question:
                raise ValueError(f"{folder}: held-out problem {item} is not the collected runs' ({question!r})")
            first, last = (cell(answers[item][1] if answers else None) for answers in (before, after))
            if first and base.get(item, "") not in ("", first):
                raise ValueError(f"{folder}: held-out problem {item}'s reply before training is not the other runs'")
            if first:
                base[item] = first
            items.append([run, item, last])
    questions = known | problems
    paths = results / RUNS_CSV, results / HELDOUT_CSV, results / PROBLEMS_CSV
    with paths[0].open("w", newline="") as f:
        writer = csv.DictWriter(f, RUN_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(runs)
    with paths[1].open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HELDOUT_COLUMNS)
        writer.writerows(items)
    with paths[2].open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(PROBLEM_COLUMNS)
        writer.writerows([item, q, operation(q), base.get(item, "")] for item, q in sorted(questions.items()))
    return paths


def load(results: Path = RESULTS) -> tuple[dict[str, dict[int, dict]], dict[tuple[str, int], list[tuple[str, float]]]]:
    """From the three CSV files: arm -> seed -> the run's summary values (runs.csv's order, with `gains`: the gain of
    each held-out problem, after minus before, in item order), and (arm, seed) -> the (operation, correct) of each
    held-out reply after training. The gains take the before-reply problems.csv shares between runs (every run starts
    from the base model and decodes greedily); a run whose own summary's accuracy before training is not those
    replies' mean is refused."""
    runs: dict[str, dict[int, dict]] = {}
    key: dict[str, tuple[str, int]] = {}
    with (results / RUNS_CSV).open(newline="") as f:
        for row in csv.DictReader(f):
            arm, seed = row["arm"], int(row["seed"])
            runs.setdefault(arm, {})[seed] = {field: float(row[field]) for field in SUMMARY_FIELDS}
            key[row["run"]] = arm, seed
    with (results / PROBLEMS_CSV).open(newline="") as f:
        problems = {row["item"]: (row["operation"], row["correct_before"]) for row in csv.DictReader(f)}
    after: dict[tuple[str, int], list[tuple[str, float]]] = {}
    shared_before: dict[tuple[str, int], list[float]] = {}  # each run's before-replies, as problems.csv shares them
    with (results / HELDOUT_CSV).open(newline="") as f:
        for row in csv.DictReader(f):
            arm, seed = key[row["run"]]
            op, before = problems[row["item"]]
            if row["correct_after"] != "":
                after.setdefault((arm, seed), []).append((op, float(row["correct_after"])))
            if row["correct_after"] != "" and before != "":
                runs[arm][seed].setdefault("gains", []).append(float(row["correct_after"]) - float(before))
                shared_before.setdefault((arm, seed), []).append(float(before))
    for (arm, seed), shared in shared_before.items():
        own = runs[arm][seed]["heldout_acc_before"]
        if abs(statistics.fmean(shared) - own) > 1e-9:
            raise ValueError(
                f"{arm} seed {seed}: heldout_acc_before {own} is not the shared "
                f"before-replies' {statistics.fmean(shared)} (not started from the base model?)"
            )
    return runs, after


def by_operation(after: dict[tuple[str, int], list[tuple[str, float]]], arm: str, seeds: list[int]) -> dict[str, float]:
    """Held-out accuracy after training per operation ("+", "-"), over the seeds' replies."""
    right: dict[str, list[float]] = {"+": [], "-": []}
    for seed in seeds:
        for op, correct in after.get((arm, seed), []):
            right[op].append(correct)
    return {op: statistics.fmean(v) if v else math.nan for op, v in right.items()}


def _table_of(runs: dict[str, dict[int, dict]], arm: str, seeds: list[int]) -> list[list[float]] | None:
    """[seeds, problems] gains of `arm`, None where a run has no per-problem rows."""
    rows = [runs[arm][s].get("gains") for s in seeds]
    return None if any(r is None for r in rows) else rows  # type: ignore[return-value]


def t_ci(values: list[float]) -> tuple[float, float, float]:
    """mean +- t(0.975, n-1) sd / sqrt(n) over seeds: for runs without per-problem rows (the problems held fixed)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def _gain(run: dict) -> float:
    return run["heldout_acc_after"] - run["heldout_acc_before"]


def ci(runs: dict[str, dict[int, dict]], arm: str, seeds: list[int]) -> tuple[float, float, float]:
    """Mean gain of `arm` over `seeds` with its seeds x problems 95% interval (nan bounds for one seed; the
    t-interval over seeds where a run lacks per-problem rows)."""
    table = _table_of(runs, arm, seeds)
    if table is None or len(seeds) < 2:
        return t_ci([_gain(runs[arm][s]) for s in seeds])
    mean, (lo, hi) = seeds_items_ci(table)
    return mean, lo, hi


def paired_ci(runs: dict[str, dict[int, dict]], arm: str, base: str, seeds: list[int]) -> tuple[float, float, float]:
    """Mean gain of `arm` minus `base`'s on the same problems and seed numbers (one seed starts both arms from the
    same data order and adapters: paired), with the seeds x problems interval of the per-problem differences."""
    a, b = _table_of(runs, arm, seeds), _table_of(runs, base, seeds)
    if a is None or b is None or len(seeds) < 2:
        return t_ci([_gain(runs[arm][s]) - _gain(runs[base][s]) for s in seeds])
    d, (lo, hi) = seeds_items_ci([[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)])
    return d, lo, hi


def gains_of(runs: dict[str, dict[int, dict]], arms: list[str]) -> dict[str, dict[int, float]]:
    """arm -> seed -> held-out accuracy after training minus before, seeds in order."""
    return {
        arm: {s: r["heldout_acc_after"] - r["heldout_acc_before"] for s, r in sorted(runs.get(arm, {}).items())}
        for arm in arms
    }


def table(runs: dict[str, dict[int, dict]], after: dict, arms: list[str]) -> list[str]:
    """The report's markdown table, one line per arm with runs."""
    gains = gains_of(runs, arms)
    lines = [
        "| arm | seeds | after (mean) | after, by seed | after: + / - | gain mean [95% CI, seeds x problems] "
        "| min gain | vs its base, paired [95% CI] | s per run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        g = gains[arm]
        if not g:
            continue
        mean, lo, hi = ci(runs, arm, list(g))
        after_mean = statistics.fmean(runs[arm][s]["heldout_acc_after"] for s in g)
        after_lo, after_hi = (f(runs[arm][s]["heldout_acc_after"] for s in g) for f in (min, max))
        base_name = base_arm(arm)
        base = gains.get(base_name) or {
            s: r["heldout_acc_after"] - r["heldout_acc_before"] for s, r in runs.get(base_name, {}).items()
        }
        shared = [s for s in g if s in base]
        paired = "—"
        if base_name != arm and shared:
            d, dlo, dhi = paired_ci(runs, arm, base_name, shared)
            paired = f"{d:+.3f} {_interval(dlo, dhi, len(shared))} vs {base_name} (n={len(shared)})"
        runtime = statistics.fmean(runs[arm][s]["runtime_s"] for s in g)
        seeds_ = ",".join(str(s) for s in g)
        ops = by_operation(after, arm, list(g))
        lines.append(
            f"| {arm} | {seeds_} | {after_mean:.3f} | {after_lo:.3f}-{after_hi:.3f} | "
            f"{ops['+']:.2f} / {ops['-']:.2f} | "
            f"{mean:+.3f} {_interval(lo, hi, len(g))} | {min(g.values()):+.3f} | "
            f"{paired} | {runtime:.0f} |"
        )
    return lines


def _interval(lo: float, hi: float, seeds: int) -> str:
    """A seeds x problems interval as the tables print it; with one seed there is none (the bootstrap gives nan)."""
    return f"[{lo:+.3f}, {hi:+.3f}]" if seeds > 1 else "[no CI: 1 seed]"


def plot(
    runs: dict[str, dict[int, dict]], gains: dict[str, dict[int, float]], path: str, min_seeds: int, full_ft: bool
) -> None:
    """Gain per seed and mean with its interval per arm; `full_ft`: full fine-tuning's gain on the same 200 problems
    as a line (at ~480 rollouts against the arms' ~3,400: a reference, not a matched rival)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [a for a in gains if len(gains[a]) >= min_seeds]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(shown) + 1.5))
    for i, arm in enumerate(shown):
        values = list(gains[arm].values())
        mean, lo, hi = ci(runs, arm, list(gains[arm]))
        ax.scatter(values, [i] * len(values), color="0.5", s=14, zorder=3)
        colour = "C1" if arm == MAKE_TRAIN_ARM else "C0"  # the make-train preset in orange
        ax.errorbar([mean], [i], xerr=[[mean - lo], [hi - mean]], fmt="o", color=colour)
    ax.axvline(0, color="0.8", lw=1)
    if full_ft:
        label = f"full fine-tuning, +{FULL_FT_GAIN:.2f} (~480 rollouts)"
        ax.axvline(FULL_FT_GAIN, color="C2", lw=1, ls="--", label=label)
        ax.legend(loc="upper left", fontsize=8)
    ax.set_yticks(range(len(shown)), shown)
    ax.invert_yaxis()
    problems = {len(r.get("gains", [])) for arm in shown for r in runs[arm].values()}
    ax.set_xlabel(f"held-out accuracy gain ({'/'.join(map(str, sorted(problems)))} problems)")
    ax.set_title(
        "GRPO + LoRA on SmolLM2-135M, make-train configuration\n"
        f"gain per seed (grey), mean, 95% CI over seeds x problems; arms with >= {min_seeds} seeds; orange: the preset",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", help="comma list (default: all with results)")
    p.add_argument("--plot", help="default: gains.png beside results/, or in any other --results folder")
    p.add_argument("--plot-min-seeds", type=int, default=3, help="arms with fewer seeds are left out of the plot")
    p.add_argument("--results", type=Path, default=RESULTS, help="the folder of the CSV files")
    p.add_argument("--report", type=Path, help="the markdown table (default: <results>/report.md)")
    p.add_argument("--collect", action="store_true", help="first build the CSV files from <results>/<arm>/seed<S>/")
    args = p.parse_args(argv)
    if args.collect:
        for path in collect(args.results):
            print(f"collected: {path}", file=sys.stderr)
    args.plot = args.plot or str(HERE / "gains.png" if args.results == RESULTS else args.results / "gains.png")
    runs, after = load(args.results)
    arms = args.arms.split(",") if args.arms else [a for a in ARMS if a in runs] + [a for a in runs if a not in ARMS]
    lines = table(runs, after, arms)
    print("\n".join(lines))
    command = COMMAND + (f" --arms {args.arms}" if args.arms else "")
    (args.report or args.results / REPORT_MD).write_text("\n".join([f"<!-- {command} -->", *lines]) + "\n")
    plot(runs, gains_of(runs, arms), args.plot, args.plot_min_seeds, full_ft=args.results == RESULTS)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
