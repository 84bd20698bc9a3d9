"""The tables of experiments/memory_plan (the plan against measured peaks) from the CSV tables in results/.

    python experiments/memory_plan/report.py                      # results/*.csv -> results/report.md
    python experiments/memory_plan/report.py --collect FILE ...   # first validate.py's output into results/rss.csv

`--collect FILE ...` reads what `python experiments/memory_plan/validate.py` printed (one JSON line per case:
params_total, params_trainable, planned_gib, measured_gib, error) and merges it into

    rss.csv         one row per CPU case (size x LoRA/full): parameters and trainable parameters in millions,
                    the plan's peak, the measured peak RSS (GiB), plan / measured - 1, where the row comes from

replacing the rows of the cases it has and keeping the others. The other tables were typed in from their runs:

    live_bytes.csv  per case of tests/hardware/test_plan_vs_measured.py (`pytest -s`): live tensor bytes of one
                    CPU step, measured and planned (MiB), plan / measured
    h100.csv        per case of issue 24's H100 runs: the plan before, the plan now (peak, tensors), the measured
                    `torch.cuda.max_memory_allocated`, tensors vs measured (%)
    params.csv      per model config: total and active parameters of `mode=plan` and as published (billions)
    verdicts.csv    per `mode=plan` command: peak, device GiB, fits
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from posttrain.analysis.tables import read_csv

_read_csv = functools.partial(read_csv, missing_ok=True)

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/memory_plan/report.py"
RSS = ("case", "params_m", "trainable_m", "planned_gib", "measured_gib", "error", "source")


def _fmt(value: object, digits: int, sign: str = "") -> str:
    """`value` to `digits` decimals, halves rounded up."""
    text = str(Decimal(str(value)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))
    return f"+{text}" if sign and not text.startswith("-") else text


def collect(paths: list[Path], out: Path) -> list[Path]:
    new = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "case" in rec and "measured_gib" in rec:
                new[rec["case"]] = {
                    "case": rec["case"],
                    "params_m": rec["params_total"] / 1e6,
                    "trainable_m": rec["params_trainable"] / 1e6,
                    "planned_gib": rec["planned_gib"],
                    "measured_gib": rec["measured_gib"],
                    "error": rec["error"],
                    "source": path.name,
                }
    if not new:
        sys.exit(f"no validate.py case lines in {', '.join(map(str, paths))}")
    rows = {row["case"]: row for row in _read_csv(out / "rss.csv")} | new
    out.mkdir(parents=True, exist_ok=True)
    with (out / "rss.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, RSS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows.values())
    return [out / "rss.csv"]


def rss_table(rows: list[dict[str, str]]) -> list[str]:
    lines = [
        "| case | params | trainable | planned GiB | measured peak RSS GiB | plan error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {_fmt(r['params_m'], 1)}M | {_fmt(r['trainable_m'], 2)}M | {_fmt(r['planned_gib'], 3)} "
            f"| {_fmt(r['measured_gib'], 3)} | {_fmt(float(r['error']) * 100, 1, sign='+')}% |"
        )
    return lines


def live_table(rows: list[dict[str, str]]) -> list[str]:
    lines = ["| case | measured MiB | planned MiB | plan / measured |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['measured_mib']} | {r['planned_mib']} | {r['plan_over_measured']} |" for r in rows]
    return lines


def h100_table(rows: list[dict[str, str]]) -> list[str]:
    lines = [
        "| case | plan before (peak GiB) | plan now: peak / tensors GiB | H100 measured GiB | tensors vs measured |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['plan_before_peak_gib']} | {r['plan_peak_gib']} / {r['plan_tensor_gib']} "
            f"| {r['measured_gib']} | {_fmt(r['tensors_vs_measured_pct'], 1, sign='+')}% |"
        )
    return lines


def params_table(rows: list[dict[str, str]]) -> list[str]:
    lines = ["| model | total (plan) | published | active (plan) | published |", "|---|---|---|---|---|"]
    for r in rows:
        name = f"{r['model']} ({r['published_name']})" if r["published_name"] else r["model"]
        active = f"{r['active_published_b']}B" if r["active_published_b"] else f"({r['note']})"
        lines.append(
            f"| {name} | {r['total_plan_b']}B | {r['total_published_b']}B | {r['active_plan_b']}B | {active} |"
        )
    return lines


def verdicts_table(rows: list[dict[str, str]]) -> list[str]:
    lines = ["| command | peak GiB | device GiB | fits |", "|---|---|---|---|"]
    for r in rows:
        fits = f"false ({r['note']})" if r["fits"] == "false" else ", ".join(x for x in (r["fits"], r["note"]) if x)
        lines.append(f"| `python train.py {r['overrides']} mode=plan` | {r['peak_gib']} | {r['device_gib']} | {fits} |")
    return lines


def report(results: Path, out: Path) -> Path:
    read = lambda name: _read_csv(results / f"{name}.csv")
    rss = read("rss")
    sources = sorted({r["source"] for r in rss})
    text = [
        f"<!-- {COMMAND} -->",
        "",
        "## Measured vs planned: peak RSS of GRPO runs on CPU (`validate.py`)",
        "",
        *rss_table(rss),
        "",
        f"Rows from: {'; '.join(sources)}.",
        "",
        "## Against live tensor bytes on CPU (`tests/hardware/test_plan_vs_measured.py`, 2026-11-25)",
        "",
        *live_table(read("live_bytes")),
        "",
        "## Against the H100 allocator (issue 24, commit 2d62e03; plans at commit 7d942dd)",
        "",
        *h100_table(read("h100")),
        "",
        "## Parameter counts (`mode=plan`, from config) vs published",
        "",
        *params_table(read("params")),
        "",
        "## Verdicts (`mode=plan` at commits 7d942dd and 39781da; algo.max_prompt_length=256, "
        "max_completion_length=16)",
        "",
        *verdicts_table(read("verdicts")),
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="the CSV tables (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md goes (default: --results)")
    ap.add_argument("--collect", nargs="+", type=Path, help="validate.py's printed output to collect first")
    args = ap.parse_args(argv)
    if args.collect:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    path = report(args.results, args.out or args.results)
    print(path.read_text())


if __name__ == "__main__":
    main()
