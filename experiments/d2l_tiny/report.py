"""The tables of experiments/d2l_tiny from the CSV tables in results/.

    python experiments/d2l_tiny/report.py                # results/*.csv -> results/report.md
    python experiments/d2l_tiny/report.py --collect      # first the CSVs from the runs' copied JSON files
    python experiments/d2l_tiny/report.py --collect DIR --results OUT

A D2L training run writes `eval.json` (held-out scores per condition, example generations) and `summary.json`
(training means, runtime) in its run dir; copy them to results/<RUN>_<anything>_eval.json and
..._summary.json (git-ignored; <RUN> is the table's run letter; an optional ..._config.yaml, the run's config.yaml,
gives its initializer range and documents, else the name's `init<x>` and `<n>docs` parts do). `--collect [DIR]`
reads those pairs in DIR (default results/) and merges them into

    runs.csv      one row per run: initializer range, training documents, every scalar of summary.json (runtime,
                  steps, first/last-5 means of the losses, internalization ms per document), held-out documents and
                  questions, answer_ce_floor (typed in: the best answer CE any final hidden state reaches)
    eval.csv      one row per (run, condition): answer loss, exact match, ROUGE-L
    examples.csv  one row per (run, example question): the answer and each condition's greedy generation
                  (JSON strings)

keeping the values a new run does not have (answer_ce_floor, the documents of runs named without them).
budget.csv (the slow end-to-end test's budget, per task, steps and seed) was typed in from those test runs.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from posttrain.analysis.tables import read_csv

_read_csv = functools.partial(read_csv, missing_ok=True)

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/d2l_tiny/report.py"
CONDITIONS = {"no_context": "no context", "in_context": "in context", "d2l": "D2L", "d2l_other_doc": "D2L, other doc"}
METRICS = ("answer_loss", "exact_match", "rouge_l")
DEFAULT_DOCS = 2000  # data.num_train of conf/data/d2l_synth.yaml: the label names other values only


def _write_csv(path: Path, rows: list[dict], header: list[str] | None = None) -> None:
    header = header or list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: "" if row.get(k) is None else row.get(k) for k in header} for row in rows])


def _config(path: Path, stem: str) -> dict:
    init = docs = None
    if path.is_file():
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(path)
        init = OmegaConf.select(cfg, "model.arch.initializer_range")
        docs = OmegaConf.select(cfg, "data.num_train")
    if init is None and (m := re.search(r"_init([\d.]+?)(?:_|$)", stem)):
        init = m.group(1)
    if docs is None and (m := re.search(r"_(\d+)docs(?:_|$)", stem)):
        docs = int(m.group(1))
    return {"initializer_range": init, "num_train": docs}


def collect(raw: Path, out: Path) -> list[Path]:
    runs, evals, examples = {}, [], []
    for path in sorted(raw.glob("*_eval.json")):
        stem = path.name.removesuffix("_eval.json")
        summary_path = raw / f"{stem}_summary.json"
        if not summary_path.is_file():
            continue
        run = stem.split("_")[0]
        data, summary = json.loads(path.read_text()), json.loads(summary_path.read_text())
        row = {"run": run, "file": stem, **_config(raw / f"{stem}_config.yaml", stem)}
        row |= {k: v for k, v in summary.items() if not k.startswith("eval_") and isinstance(v, int | float | str)}
        row |= {"num_docs": data.get("num_docs"), "num_questions": data.get("num_questions")}
        runs[run] = row
        for cond in CONDITIONS:
            if cond in data:
                evals.append({"run": run, "condition": cond, **{m: data[cond].get(m) for m in METRICS}})
        for i, ex in enumerate(data.get("examples", [])):
            examples.append({"run": run, "example": i, **{k: json.dumps(v, ensure_ascii=False) for k, v in ex.items()}})
    if not runs:
        sys.exit(f"no <run>_eval.json with its <run>_summary.json in {raw}")
    out.mkdir(parents=True, exist_ok=True)
    merged = {row["run"]: dict(row) for row in _read_csv(out / "runs.csv")}
    for run, row in runs.items():
        merged[run] = merged.get(run, {}) | {k: v for k, v in row.items() if v not in (None, "")}
    lead = ["run", "file", "initializer_range", "num_train"]
    header = list(dict.fromkeys([*lead, *(k for r in merged.values() for k in r), "answer_ce_floor"]))
    _write_csv(out / "runs.csv", [merged[r] for r in sorted(merged)], header)
    kept = lambda name: [r for r in _read_csv(out / name) if r["run"] not in runs]
    _write_csv(
        out / "eval.csv", sorted(kept("eval.csv") + evals, key=lambda r: r["run"]), ["run", "condition", *METRICS]
    )
    rows = sorted(kept("examples.csv") + examples, key=lambda r: (r["run"], int(r["example"])))
    _write_csv(out / "examples.csv", rows)
    return [out / "runs.csv", out / "eval.csv", out / "examples.csv"]


def _fmt(value: object, digits: int) -> str:
    """`value` to `digits` decimals, halves rounded up (as the README's figures were)."""
    return str(Decimal(str(value)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def _label(run: dict[str, str]) -> str:
    docs = run.get("num_train", "")
    extra = f", {docs} docs" if docs not in ("", str(DEFAULT_DOCS)) else ""
    return f"{run['run']} (init {run['initializer_range']}{extra})"


def results_table(runs: list[dict[str, str]], scores: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    lines = ["| run | steps (wall) | condition | answer loss ↓ | EM | ROUGE-L |", "|---|---|---|---|---|---|"]
    for run in runs:
        head = [_label(run), f"{run['final_step']} ({_fmt(run['runtime_s'], 0)} s)"]
        for cond, name in CONDITIONS.items():
            s = scores[run["run"]].get(cond)
            if s is None:
                continue
            loss = _fmt(s["answer_loss"], 3)
            if cond == "d2l":
                name, loss = f"**{name}**", f"**{loss}**"
            cells = [*head, name, loss, _fmt(s["exact_match"], 2), _fmt(s["rouge_l"], 2)]
            lines.append("| " + " | ".join(cells) + " |")
            head = ["", ""]
    return [line.replace("|  |  |", "| | |") for line in lines]


def _diff(a: str, b: str) -> str:
    """a - b of the table's 3-decimal losses, to 2 decimals (the README's differences)."""
    return _fmt(Decimal(_fmt(a, 3)) - Decimal(_fmt(b, 3)), 2)


def runs_table(runs: list[dict[str, str]], scores: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    lines = [
        "| run | train CE, first -> last 5 logged | internalize ms/doc | D2L - no context | other doc - D2L "
        "| D2L - in context | best reachable answer CE |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        s = {c: v["answer_loss"] for c, v in scores[run["run"]].items()}
        ce = f"{_fmt(run['ce_loss_first5_mean'], 2)} -> {_fmt(run['ce_loss_last5_mean'], 2)}"
        cells = [run["run"], ce, _fmt(run["internalize_ms_per_doc"], 1)]
        cells += [
            _diff(s["d2l"], s["no_context"]),
            _diff(s["d2l_other_doc"], s["d2l"]),
            _diff(s["d2l"], s["in_context"]),
        ]
        cells.append(_fmt(run["answer_ce_floor"], 2) if run.get("answer_ce_floor") else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def budget_tables(rows: list[dict[str, str]]) -> list[str]:
    cell = lambda r, k, d: _fmt(r[k], d) if r[k] else "-"
    lines = []
    for task in dict.fromkeys(r["task"] for r in rows):
        lines += [f"{task}:", ""]
        lines += [
            "| steps | seed | no context | D2L | D2L, other doc | other − D2L | wall (loaded 2-core box) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r["task"] == task):
            cells = [r["steps"], r["seed"] or "-", cell(r, "no_context", 3), cell(r, "d2l", 3)]
            cells += [cell(r, "d2l_other_doc", 3), cell(r, "other_minus_d2l", 2)]
            cells.append(f"{r['wall_s']} s" if r["wall_s"] else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def examples_table(rows: list[dict[str, str]]) -> list[str]:
    lines = ["| run | question | answer | " + " | ".join(CONDITIONS.values()) + " |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["run"], json.loads(r["question"]), json.loads(r["answer"])]
        cells += ["`" + (r.get(c) or "").replace("|", "\\|").replace("`", "'") + "`" for c in CONDITIONS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(results: Path, out: Path) -> Path:
    runs = _read_csv(results / "runs.csv")
    scores: dict[str, dict[str, dict[str, str]]] = {r["run"]: {} for r in runs}
    for row in _read_csv(results / "eval.csv"):
        scores.setdefault(row["run"], {})[row["condition"]] = row
    docs = {(r["num_docs"], r["num_questions"]) for r in runs}
    held = ", ".join(f"{d} docs, {q} questions" for d, q in sorted(docs))
    text = [
        f"<!-- {COMMAND} -->",
        "",
        f"## Held-out documents ({held})",
        "",
        *results_table(runs, scores),
        "",
        "## Per run: training, latency, differences of the answer losses above",
        "",
        *runs_table(runs, scores),
        "",
        "## The slow end-to-end test's budget (`tests/algos/d2l/test_e2e.py`; answer loss, nats/token)",
        "",
        *budget_tables(_read_csv(results / "budget.csv")),
        "## Greedy answers (the first held-out questions, JSON-escaped)",
        "",
        *examples_table(_read_csv(results / "examples.csv")),
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
    ap.add_argument("--collect", nargs="?", const=HERE / "results", type=Path, help="the copied run JSON files")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    path = report(args.results, args.out or args.results)
    print(path.read_text())


if __name__ == "__main__":
    main()
