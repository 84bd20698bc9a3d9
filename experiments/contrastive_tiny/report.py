"""The tables of experiments/contrastive_tiny from results/metrics.csv.

    python experiments/contrastive_tiny/report.py                  # results/metrics.csv -> results/report.md
    python experiments/contrastive_tiny/report.py --collect [DIR]  # first the CSV from run.sh's run dirs

`--collect [DIR]` (default runs/contrastive_tiny, what run.sh writes) reads, for each of the three runs
(vulnerable = stage 0, contrastive, lm_only), DIR/<run>/summary.json (the held-out evaluation before and after
training), DIR/<run>/metrics.jsonl (the training log) and DIR/<run>/probe.json (what probe_repr.py writes), and
merges them into

    metrics.csv  one row per (run, source, metric): source eval_before / eval_after (every scalar of the evaluation,
                 the ASR per attack type as asr_by_type/<type>), train (means over the last 50 logged steps of the
                 LM loss and the InfoNCE term), probe (mean cosines of the pooled representation and of the head)

replacing the rows of the runs it finds and keeping the others.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
from pathlib import Path

from posttrain.analysis.tables import read_csv

_read_csv = functools.partial(read_csv, missing_ok=True)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COMMAND = "python experiments/contrastive_tiny/report.py"
RUNS = {"vulnerable": "vulnerable start", "contrastive": "contrastive + LM", "lm_only": "LM only"}
COLUMNS = ("asr_heldout", "asr_train_templates", "utility_benign", "utility_injected")
TRAIN = {"lm_loss": "lm_loss_last50", "nce": "nce_last50"}  # log key -> metric (mean over the last 50 steps)
PROBE = (
    "pooled_cos_benign_counterfactual",
    "pooled_cos_benign_injected",
    "head_cos_benign_counterfactual",
    "head_cos_benign_injected",
)
FIELDS = ("run", "source", "metric", "value")


def _scalars(prefix: str, values: dict) -> list[tuple[str, float]]:
    out = []
    for key, value in values.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out.append((f"{prefix}{key}", value))
        elif key == "asr_by_type" and isinstance(value, dict):
            out += _scalars("asr_by_type/", value)
    return out


def _run_rows(run: str, folder: Path) -> list[list]:
    rows = []
    summary = folder / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text())
        for source in ("eval_before", "eval_after"):
            rows += [[run, source, k, v] for k, v in _scalars("", data.get(source) or {})]
    metrics = folder / "metrics.jsonl"
    if metrics.is_file():
        log = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.startswith("{")]
        for key, name in TRAIN.items():
            values = [rec[key] for rec in log if isinstance(rec.get(key), int | float)][-50:]
            if values:
                rows.append([run, "train", name, sum(values) / len(values)])
    probe = folder / "probe.json"
    if probe.is_file():
        data = json.loads(probe.read_text())
        rows += [[run, "probe", k, data[k]] for k in PROBE if k in data]
    return rows


def collect(raw: Path, out: Path) -> list[Path]:
    new = {run: rows for run in RUNS if (rows := _run_rows(run, raw / run))}
    if not new:
        sys.exit(f"no summary.json, metrics.jsonl or probe.json under {raw}/{{{','.join(RUNS)}}}")
    old: dict[str, list[list]] = {}
    for row in _read_csv(out / "metrics.csv"):
        old.setdefault(row["run"], []).append([row[k] for k in FIELDS])
    merged = old | new
    out.mkdir(parents=True, exist_ok=True)
    with (out / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(FIELDS)
        for run in [*RUNS, *sorted(set(merged) - set(RUNS))]:
            writer.writerows(merged.get(run, []))
    return [out / "metrics.csv"]


def read_metrics(results: Path) -> dict[tuple[str, str], dict[str, float]]:
    """{(run, source): {metric: value}}."""
    table: dict[tuple[str, str], dict[str, float]] = {}
    for row in _read_csv(results / "metrics.csv"):
        table.setdefault((row["run"], row["source"]), {})[row["metric"]] = float(row["value"])
    return table


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def tables(m: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    start = m.get(("contrastive", "eval_before")) or m.get(("lm_only", "eval_before"), {})
    n_held, n_train = (int(start[k]) if k in start else "?" for k in ("n_heldout", "n_train_templates"))
    lines = [
        f"| weights | held-out ASR (n={n_held}) | train-template ASR (n={n_train}) | benign utility "
        "| utility under injection |",
        "|---|---|---|---|---|",
        "| before: vulnerable start (both runs start here) | " + " | ".join(_f(start.get(c)) for c in COLUMNS) + " |",
    ]
    for run, label in (("contrastive", "contrastive + LM"), ("lm_only", "LM only (ablation)")):
        if (run, "eval_after") in m:
            lines.append(f"| after: {label} | " + " | ".join(_f(m[run, "eval_after"].get(c)) for c in COLUMNS) + " |")
    types = sorted({k.split("/", 1)[1] for (_, _), v in m.items() for k in v if k.startswith("asr_by_type/")})
    lines += ["", "ASR by attack type (`fake_completion` is the attack type held out of stage 1 entirely):", ""]
    lines += ["| attack type | before | after: contrastive + LM | after: LM only |", "|---|---|---|---|"]
    evals = [start, m.get(("contrastive", "eval_after"), {}), m.get(("lm_only", "eval_after"), {})]
    for t in types:
        lines.append(f"| {t} | " + " | ".join(_f(e.get(f"asr_by_type/{t}")) for e in evals) + " |")
    stage0 = [m.get(("vulnerable", s), {}) for s in ("eval_before", "eval_after")]
    lines += ["", "Stage 0 (the vulnerable start) on its own 100-triplet evaluation:", ""]
    lines += ["| weights | held-out ASR | train-template ASR | benign utility |", "|---|---|---|---|"]
    for label, e in zip(("random init", "after stage 0"), stage0):
        lines.append(f"| {label} | " + " | ".join(_f(e.get(c)) for c in COLUMNS[:3]) + " |")
    lines += ["", "Training, means over the last 50 logged steps:", ""]
    lines += ["| run | LM loss | InfoNCE |", "|---|---|---|"]
    for run in ("contrastive", "lm_only"):
        t = m.get((run, "train"), {})
        lines.append(f"| {RUNS[run]} | {_f(t.get('lm_loss_last50'))} | {_f(t.get('nce_last50'))} |")
    lines += [
        "",
        "Representation probe (`probe_repr.py`, 64 eval triplets: mean cosine of the masked-mean pooled hidden states "
        "*before* the head, and of the head's output):",
        "",
        "| weights | pooled: benign·paraphrase | pooled: benign·injected | head: benign·paraphrase "
        "| head: benign·injected |",
        "|---|---|---|---|---|",
    ]
    for run, label in RUNS.items():
        if (run, "probe") in m:
            lines.append(f"| {label} | " + " | ".join(_f(m[run, "probe"].get(k), 3) for k in PROBE) + " |")
    return lines


def report(results: Path, out: Path) -> Path:
    text = [f"<!-- {COMMAND} -->", "", *tables(read_metrics(results)), ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="metrics.csv (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md goes (default: --results)")
    ap.add_argument("--collect", nargs="?", const=ROOT / "runs" / "contrastive_tiny", type=Path, help="run.sh's DIR")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    path = report(args.results, args.out or args.results)
    print(path.read_text())


if __name__ == "__main__":
    main()
