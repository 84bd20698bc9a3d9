"""The tables of experiments/kernels from the CSV tables in results/.

    python experiments/kernels/report.py                        # results/*.csv -> results/report.md
    python experiments/kernels/report.py --collect              # first the CSVs from results/*.jsonl (git-ignored)
    python experiments/kernels/report.py --collect FILE_OR_DIR ... --results OUT

`--collect [PATH ...]` reads JSON-lines files (a folder: its *.jsonl, not the `.progress.jsonl` lines of every
single run; default results/) and merges what it finds into the tables, replacing the rows of the same run (file
stem) or case and keeping the others (a fresh clone has the tables, not the raw lines):

    bench.csv     one row per (run, backend) of `python -m posttrain.bench grpo_loss` (run_tables.sh writes
                  results/<N>x<H>x<V>_<dtype>_<TAG>.jsonl): shape, dtype, min seconds over the rounds, every
                  round's seconds and load average (JSON lists), peak MiB over the inputs, the ratios to eager and
                  to the two-GEMM anchor, the error of a failed backend
    accuracy.csv  one row per input case of `TRITON_INTERPRET=1 python tests/kernels/test_fused_device.py` (the GPU
                  path against an fp64 reference): log-prob, entropy, d hidden, d weight, far rows' log-prob errors

The report: the record table (the runs tagged RECORD, both shapes x fp32/bf16), one table per run, the accuracy
table.
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
COMMAND = "python experiments/kernels/report.py"
RECORD = "idle2"  # the tag of the record runs: <shape>_<dtype>_idle2.jsonl
TARGET = 1.05  # fused / two-GEMM at or under this is bold in the record table
BENCH = (
    "run",
    "backend",
    "shape",
    "dtype",
    "threads",
    "seconds",
    "times",
    "peak_mib",
    "loadavg",
    "ratio_vs_eager",
    "mem_ratio_vs_eager",
    "ratio_vs_two_gemm",
    "error",
)
ACCURACY = ("case", "run", "logp", "entropy", "dh", "dw", "far_logp_err")
# what each run was, in the order the report shows them (a run not listed follows, by name); digits of its seconds
RUNS = {
    "1024x1024x131072_fp32_idle2": ("2026-11-23, commit a4c6b35, nothing else on the machine (load 1.7-2.5)", 3),
    "2048x2880x201088_fp32_idle2": ("2026-11-23, commit a4c6b35, nothing else on the machine", 3),
    "1024x1024x131072_bf16_idle2": ("2026-11-23, commit a4c6b35, nothing else on the machine", 3),
    "2048x2880x201088_bf16_idle2": ("2026-11-23, commit a4c6b35, nothing else on the machine", 3),
    "2048x2880x201088_all_backends_idle": (
        "2026-11-22, commit e7c1ebc, torch tile loop, idle machine (load average 0.6 at start)",
        2,
    ),
    "2048x2880x201088_all_backends_run2": ("2026-11-22, commit 4b4b31d, shared machine (load average 3-14)", 1),
    "2048x2880x201088_fused_vs_two_gemm": ("2026-11-22, commit 4b4b31d, shared machine, its quietest", 1),
    "2048x2880x201088_all_backends_run1_fused1024x4096": (
        "2026-11-22, heavier load; fused with 1024 x 4096 tiles and an [N, H] backward gather (since reduced)",
        1,
    ),
    "1024x1024x131072_all_backends": ("2026-11-22, commit 3235bb6, shared machine (load average 3-14)", 1),
    "1024x1024x131072_all_backends_fused256x2048": (
        "2026-11-22, heavier load, fused with 256 x 2048 tiles: dominated by the load, not comparable",
        1,
    ),
}
NAMES = {"chunked": "chunked (TRL)", "fused": "**fused**"}
CASES = {"fp32": "fp32 (strided head and hidden)", "bf16": "bf16", "mixed": "fp32 hidden, bf16 head"}


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _write_csv(path: Path, header: tuple[str, ...], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([[_cell(row.get(k)) for k in header] for row in rows])


def _files(paths: list[Path]) -> list[Path]:
    files = []
    for path in paths:
        found = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        files += [f for f in found if not f.name.endswith(".progress.jsonl")]
    return files


def collect(paths: list[Path], out: Path) -> list[Path]:
    bench: dict[str, list[dict]] = {}
    accuracy: dict[str, dict] = {}
    for path in _files(paths):
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if rec.get("bench") == "grpo_loss" and "backend" in rec:
                row = {**rec, "run": path.stem, "shape": "x".join(map(str, rec["shape"]))}
                bench.setdefault(path.stem, []).append(row)
            elif "case" in rec and "logp" in rec:
                accuracy[rec["case"]] = {**rec, "run": path.stem}
    if not bench and not accuracy:
        sys.exit(f"no grpo_loss bench records or fused_device accuracy cases in {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if bench:
        rows = {}
        for row in _read_csv(out / "bench.csv"):
            rows.setdefault(row["run"], []).append(row)
        rows.update(bench)
        _write_csv(out / "bench.csv", BENCH, [r for run in sorted(rows) for r in rows[run]])
        written.append(out / "bench.csv")
    if accuracy:
        cases = {row["case"]: row for row in _read_csv(out / "accuracy.csv")} | accuracy
        _write_csv(out / "accuracy.csv", ACCURACY, list(cases.values()))
        written.append(out / "accuracy.csv")
    return written


def _fmt(value: object, digits: int) -> str:
    """`value` to `digits` decimals, halves rounded up as the README's tables were (27.555 -> 27.56)."""
    return str(Decimal(str(value)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def _bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def record_table(runs: dict[str, list[dict]]) -> list[str]:
    """Both shapes x fp32/bf16 of the RECORD runs: fused against two plain GEMMs, the torch tile loop beside it."""
    lines = [
        "| shape (N, H, V) | dtype | two_gemm s | **fused** s | fused / two-GEMM | fused@tiles / two-GEMM "
        "| peak MiB two_gemm / fused |",
        "|---|---|---|---|---|---|---|",
    ]
    tagged = [rows for run, rows in runs.items() if run.endswith(f"_{RECORD}")]
    tagged.sort(key=lambda rows: (rows[0]["dtype"] != "fp32", [int(n) for n in rows[0]["shape"].split("x")]))
    for rows in tagged:
        by = {r["backend"]: r for r in rows if r["error"] == ""}
        two, fused, tiles = by["two_gemm"], by["fused"], by.get("fused@tiles")
        ratio = fused["ratio_vs_two_gemm"]
        on = float(ratio) <= TARGET
        cells = [rows[0]["shape"].replace("x", ", "), rows[0]["dtype"], _fmt(two["seconds"], 3)]
        cells += [_bold(_fmt(fused["seconds"], 3), on), _bold(_fmt(ratio, 3), on)]
        cells.append(_fmt(tiles["ratio_vs_two_gemm"], 3) if tiles else "-")
        cells.append(f"{_fmt(two['peak_mib'], 0)} / {_fmt(fused['peak_mib'], 0)}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def run_table(rows: list[dict], digits: int) -> list[str]:
    """One run, one row per backend: as the bench printed it (min over rounds, every round, peak MiB, ratios)."""
    eager = any(r["ratio_vs_eager"] != "" for r in rows)
    load = any(r["loadavg"] != "" for r in rows)
    head = ["backend", "seconds (min)", "all rounds (s)"] + ["load avg per round"] * load + ["peak MiB"]
    head += ["vs eager"] * eager + ["vs two-GEMM"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        name = NAMES.get(r["backend"], r["backend"])
        if r["error"]:
            lines.append(f"| {name} | error: {r['error']} |" + " |" * (len(head) - 2))
            continue
        fused = r["backend"] == "fused"
        cells = [name, _bold(_fmt(r["seconds"], digits), fused)]
        cells.append(", ".join(_fmt(t, digits) for t in json.loads(r["times"])))
        if load:
            cells.append(", ".join(_fmt(x, 1) for x in json.loads(r["loadavg"] or "[]")))
        cells.append(_bold(_fmt(r["peak_mib"], 0), fused))
        ratios = [r["ratio_vs_eager"]] * eager + [r["ratio_vs_two_gemm"]]
        cells += [x or "-" for x in ratios]  # as the bench rounded them
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sci(value: str) -> str:
    mantissa, exponent = f"{float(value):.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def accuracy_table(rows: list[dict[str, str]]) -> list[str]:
    lines = [
        "| inputs | log-prob (rel.) | entropy (abs.) | d hidden | d weight | far rows, logp ~ -210: abs. error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [_sci(r[k]) for k in ("logp", "entropy", "dh", "dw", "far_logp_err")]
        lines.append(f"| {CASES.get(r['case'], r['case'])} | " + " | ".join(cells) + " |")
    return lines


def report(results: Path, out: Path) -> Path:
    runs: dict[str, list[dict]] = {}
    for row in _read_csv(results / "bench.csv"):
        runs.setdefault(row["run"], []).append(row)
    order = [run for run in RUNS if run in runs] + sorted(run for run in runs if run not in RUNS)
    text = [f"<!-- {COMMAND} -->", ""]
    text += [
        f"## Record: both shapes, fp32 and bf16 (results/*_{RECORD}.jsonl, min over 3 rounds)",
        "",
        *record_table(runs),
        "",
    ]
    text += ["## Every run (`python -m posttrain.bench grpo_loss`, fp32 unless named, CPU)", ""]
    for run in order:
        rows = runs[run]
        note, digits = RUNS.get(run, ("", 3))
        title = f"### {run} ({rows[0]['shape'].replace('x', ' x ')}, {rows[0]['dtype']})"
        text += [title, "", *([note, ""] if note else []), *run_table(rows, digits), ""]
    accuracy = _read_csv(results / "accuracy.csv")
    if accuracy:
        text += [
            "## GPU path accuracy (`TRITON_INTERPRET=1 python tests/kernels/test_fused_device.py`, fp64 reference)",
            "",
            "N 37, H 24, V 1000, T 0.7, tiles 16 x 192; gradients as max |error| / max |reference|.",
            "",
            *accuracy_table(accuracy),
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
    ap.add_argument("--collect", nargs="*", type=Path, help="JSON-lines files or folders to collect first")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect or [HERE / "results"], args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    path = report(args.results, args.out or args.results)
    print(path.read_text())


if __name__ == "__main__":
    main()
