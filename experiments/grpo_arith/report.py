"""The table and reward curves of experiments/grpo_arith from the CSV tables in results/.

    python experiments/grpo_arith/report.py              # results/*.csv -> results/report.md, reward_curve.png
    python experiments/grpo_arith/report.py --collect    # first the CSVs from what run.py wrote (git-ignored)
    python experiments/grpo_arith/report.py --collect DIR --results OUT

`--collect [DIR]` reads run.py's outputs in DIR (default: this folder): results.json (held-out scores before and
after training, training reward means and runtime, the constant-answer baseline) and metrics_<condition>.jsonl
(one line per optimizer step), and writes

    eval.csv    one row per (condition, metric) of results.json
    steps.csv   one row per (condition, optimizer step): the rewards, the share of groups with zero reward
                variance, completion length, entropy, KL
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posttrain.analysis.tables import cell as _cell
from posttrain.analysis.tables import read_csv as _read_csv
from posttrain.analysis.tables import write_csv as _write_csv

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/grpo_arith/report.py"
CONDITIONS = {"math": "math reward", "math+format": "math + 0.5 × numeric_answer"}  # run.py's, as the table names them
BASELINE = "constant_answer_baseline"
STEP_COLUMNS = (
    "reward",
    "rewards/math/mean",
    "rewards/numeric_answer/mean",
    "frac_reward_zero_std",
    "completions/mean_length",
    "entropy",
    "kl",
)


def collect(raw: Path, out: Path) -> list[Path]:
    results = json.loads((raw / "results.json").read_text())
    rows = [[name, metric, _cell(value)] for name, metrics in results.items() for metric, value in metrics.items()]
    steps = []
    for name in results:
        path = raw / f"metrics_{name.replace('+', '_')}.jsonl"
        if name == BASELINE or not path.is_file():
            continue
        for rec in (json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()):
            steps.append([name, rec["step"], *(_cell(rec.get(k)) for k in STEP_COLUMNS)])
    if not steps:
        sys.exit(f"no metrics_<condition>.jsonl in {raw}")
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "eval.csv", ("condition", "metric", "value"), rows)
    _write_csv(out / "steps.csv", ("condition", "step", *STEP_COLUMNS), steps)
    return [out / "eval.csv", out / "steps.csv"]


def read_tables(results: Path) -> tuple[dict[str, dict[str, str]], dict[str, list[dict]]]:
    """({condition: {metric: value as written}}, {condition: its per-step metrics, as metrics.jsonl has them})."""
    scores: dict[str, dict[str, str]] = {}
    for row in _read_csv(results / "eval.csv"):
        scores.setdefault(row["condition"], {})[row["metric"]] = row["value"]
    curves: dict[str, list[dict]] = {}
    for row in _read_csv(results / "steps.csv"):
        rec = {"step": int(row["step"]), **{k: float(row[k]) for k in STEP_COLUMNS if row[k] != ""}}
        curves.setdefault(row["condition"], []).append(rec)
    return scores, curves


def _pct(value: str | None) -> str:
    return "—" if value in (None, "") else f"{float(value):.1%}"


def tables(scores: dict[str, dict[str, str]], curves: dict[str, list[dict]]) -> list[str]:
    lines = [
        "| condition | exact answer, before | exact answer, after | numeric format, before | numeric format, after |",
        "|---|---|---|---|---|",
    ]
    for name, s in scores.items():
        if name == BASELINE:
            continue
        cells = [_pct(s.get(k)) for k in ("eval_math_before", "eval_math_after")]
        cells += [_pct(s.get(k)) for k in ("eval_numeric_answer_before", "eval_numeric_answer_after")]
        lines.append(f"| {CONDITIONS.get(name, name)} | " + " | ".join(cells) + " |")
    if BASELINE in scores:
        b = scores[BASELINE]
        lines.append(f'| always answer "{b["answer"]}" (most frequent training answer) | {_pct(b["reward"])} | | | |')
    lines += [
        "",
        "| condition | held-out prompts | training s | exact-answer reward, first 10 steps | last 10 steps "
        "| steps | groups with zero reward variance (mean over steps) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in scores.items():
        if name == BASELINE:
            continue
        zero = [m["frac_reward_zero_std"] for m in curves.get(name, []) if "frac_reward_zero_std" in m]
        share = f"{sum(zero) / len(zero):.3f}" if zero else "-"
        lines.append(
            f"| {CONDITIONS.get(name, name)} | {s['eval_prompts']} | {float(s['train_runtime_s']):.0f} "
            f"| {float(s['train_math_first10']):.4f} | {float(s['train_math_last10']):.4f} "
            f"| {len(curves.get(name, []))} | {share} |"
        )
    return lines


def _smooth(values: list[float], k: int = 10) -> list[float]:
    return [sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharex=True)
    for name, metrics in curves.items():
        steps = [m["step"] for m in metrics]
        for ax, key in zip(axes, ("rewards/math/mean", "rewards/numeric_answer/mean")):
            if key in metrics[0]:
                ax.plot(steps, _smooth([m[key] for m in metrics]), label=name)
    axes[0].set_title("exact-answer reward (10-step mean)")
    axes[1].set_title("numeric-answer format reward (10-step mean)")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.legend()
    fig.suptitle("GRPO, tiny_llama (random init), 1-step arithmetic")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(results: Path, out: Path, plots: bool = True) -> Path:
    scores, curves = read_tables(results)
    text = [f"<!-- {COMMAND} -->", "", *tables(scores, curves), "", "![reward curve](reward_curve.png)", ""]
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        plot(curves, out / "reward_curve.png")
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="the CSV tables (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md and reward_curve.png go (default: --results)")
    ap.add_argument("--collect", nargs="?", const=HERE, type=Path, help="run.py's outputs to collect first")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    path = report(args.results, args.out or args.results, plots=not args.no_plots)
    print(path.read_text())


if __name__ == "__main__":
    main()
