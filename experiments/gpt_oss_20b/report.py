"""The tables of experiments/gpt_oss_20b from results/runs.csv (the newest row of each arm): results/report.md.

    python experiments/gpt_oss_20b/report.py [--csv results/runs.csv] [--out results/report.md] [--tolerance 0.15]

Exit status 1 when an arm's peak RSS is off its plan by more than the tolerance (the issue's 15%).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def newest(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        out[row["arm"]] = row
    return out


def _f(row: dict[str, str], key: str, digits: int = 1) -> str:
    """The value with `digits` decimals; '-' where the run has none (no generation in D2L: 0)."""
    value = row.get(key, "")
    return f"{float(value):.{digits}f}" if value not in ("", None) and float(value) else "-"


def tables(rows: dict[str, dict[str, str]]) -> str:
    time_head = (
        "| arm | steps | build s (model) | s/step | generation | scoring | loss + backward | optimizer + other "
        "| tokens/s | commit |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    memory_head = (
        "| arm | peak RSS GiB | plan GiB | RSS / plan | RSS by phase GiB: build, generation, scoring, train "
        "| plan by phase GiB |\n|---|---|---|---|---|---|"
    )
    time_rows, memory_rows = [], []
    for arm, r in rows.items():
        rest = float(r["optimizer_s"]) + float(r["other_s"]) + float(r["rewards_s"])
        time_rows.append(
            f"| {arm} | {r['steps']} | {_f(r, 'build_s')} ({_f(r, 'model_build_s')}) | {_f(r, 'step_s')} "
            f"| {_f(r, 'generation_s')} | {_f(r, 'scoring_s')} | {_f(r, 'loss_backward_s')} | {rest:.1f} "
            f"| {_f(r, 'gen_tokens_per_s', 2)} | {r['commit']} |"
        )
        phases = ", ".join(_f(r, f"rss_{k}_gib", 2) for k in ("build", "generation", "scoring", "train"))
        plan = json.loads(r["plan_phases_gib"])
        memory_rows.append(
            f"| {arm} | {_f(r, 'peak_rss_gib', 2)} | {_f(r, 'plan_peak_gib', 2)} | {_f(r, 'rss_over_plan', 3)} "
            f"| {phases} | {', '.join(f'{k} {v:.2f}' for k, v in plan.items())} |"
        )
    return "\n".join([time_head, *time_rows, "", memory_head, *memory_rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(HERE / "results" / "runs.csv"))
    parser.add_argument("--out", default=str(HERE / "results" / "report.md"))
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as f:
        rows = newest(list(csv.DictReader(f)))
    text = tables(rows)
    print(text)
    Path(args.out).write_text(f"<!-- python experiments/gpt_oss_20b/report.py -->\n{text}\n")
    off = [a for a, r in rows.items() if abs(float(r["rss_over_plan"]) - 1) > args.tolerance]
    if off:
        print(f"\npeak RSS off the plan by more than {args.tolerance:.0%}: {', '.join(off)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
