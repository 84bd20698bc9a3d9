"""The tables of experiments/scale_out from results/compare.csv and results/memory.csv.

    python experiments/scale_out/report.py           # -> results/report.md
    python experiments/scale_out/report.py --out DIR

compare.csv: one row per algorithm x engine (compare.py): how the 2-process run ran, its differences from the
1-process run (loss, grad norm, trained weights), from its own uninterrupted run after a resume, and `mode=eval` of
both runs' checkpoints on one process. memory.csv: one row per model shape x engine (memory.py): the plan's
per-process peak and the measured peak RSS of the larger process, with freed memory returned to the system and with
glibc's defaults.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/scale_out/report.py"


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(value: str | None, fmt: str = ".1e") -> str:
    return "-" if value in ("", None) else format(float(value), fmt)


def compare_table(rows: list[dict[str, str]]) -> str:
    lines = [
        "| algorithm | engine | ran as | loss diff, max abs (max loss) | grad norm diff, rel | weight diff / update "
        "| after resume: loss diff, grad norm diff | mode=eval on 1 process: of 1-proc run, of 2-proc run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["ran_as"].startswith("refused"):
            lines.append(f"| {r['case']} | {r['engine']} | {r['ran_as']} | | | | | |")
            continue
        evals = "-"
        if r.get("eval_one_process_run"):
            evals = (
                f"{r['eval_figure']} {float(r['eval_one_process_run']):.4f}, {float(r['eval_two_process_run']):.4f} "
                f"(any figure: {_num(r['eval_max_abs_diff'])})"
            )
        lines.append(
            f"| {r['case']} | {r['engine']} | {r['ran_as']} | {_num(r['loss_max_abs'])} "
            f"({_num(r['loss_scale'], '.2g')})"
            f" | {_num(r['grad_norm_rel'])} | {_num(r['weight_diff_over_update'])} | {_num(r['resume_loss_max_abs'])}, "
            f"{_num(r['resume_grad_norm_rel'])} | {evals} |"
        )
    return "\n".join(lines)


def memory_table(rows: list[dict[str, str]]) -> str:
    lines = [
        "| shape | engine | params | planned GiB per process (phase) | peak RSS GiB, freed memory returned "
        "| plan error | peak RSS GiB, glibc defaults | plan error | largest planned terms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        terms = sorted(json.loads(r["components_gib"]).items(), key=lambda kv: -kv[1])[:3]
        named = ", ".join(f"{k} {v:.3f}" for k, v in terms)
        lines.append(
            f"| {r['shape']} | {r['engine']} | {float(r['params_m']):.1f}M | "
            f"{float(r['planned_gib']):.3f} ({r['planned_phase']}) | "
            f"{float(r['returned_gib']):.3f} | {float(r['returned_error']) * 100:+.1f}% | "
            f"{float(r['measured_gib']):.3f} | {float(r['error']) * 100:+.1f}% | {named} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    parts = [f"<!-- {COMMAND} -->", "", "## 2 processes against 1 (compare.csv)", ""]
    parts += [compare_table(_read(args.results / "compare.csv")), ""]
    if (args.results / "memory.csv").is_file():
        parts += ["## Per-process memory: plan against peak RSS (memory.csv)", ""]
        parts += [memory_table(_read(args.results / "memory.csv")), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
