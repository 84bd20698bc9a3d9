"""Tables and plots of experiments/d2l_smollm2 (issue 27), from the compact per-question tables under results/:

    python experiments/d2l_smollm2/report.py              # results/*.csv -> results/report.md and the plots
    python experiments/d2l_smollm2/report.py --collect    # the raw run folders of SOURCES -> results/*.csv
    python experiments/d2l_smollm2/report.py --collect NAME=DIR ...     # add or replace sources in the CSVs
    python experiments/d2l_smollm2/report.py --results DIR [--rows ...] [--docs ...]   # one raw folder (below)

The default mode reads only results/runs.csv, results/fit.csv and results/long.csv and writes results/report.md
(its first line: the command) with the must-show table of README.md and one section per SECTION, and the plots of
PLOTS (`--out` writes them elsewhere; the first line leaves `--out` out: the same content). Each section is what
`--results` printed for the raw folders before they left git (2026-12-01), its command beside it.

`--collect` builds the CSVs from raw run folders (those of SOURCES, which stay on the disk of whoever ran them, or
NAME=DIR: future runs): a source is a folder of s<seed>[_x<k>]/ runs (a run group) or one run (eval.json in it: a
baseline that reads no hypernet, run once and paired with every seed). runs.csv has a row per run (eval.json's
timing, summary.json's steps and runtime, time_v.txt and loadavg.txt, the question list's fingerprint, the commit
that last wrote its eval.json); fit.csv a row per (source, run, question, condition) on the documents that fit (the
facts alone: every metric); long.csv the same among filler at k x the window, with what the tables read there
(LENGTH_CONDITIONS; accuracy, F1, answer NLL and tokens: the other-entity control and exact match stay in the raw
eval.json). Floats keep 6 significant digits (every figure of the report is the same as from the raw files).

`--results DIR` reads DIR/s<seed>/eval.json (the held-out documents, the facts alone, evaluated after training) and
DIR/s<seed>_x<k>/eval.json (the same documents and questions among filler, k x the context window), with
summary.json, time_v.txt and loadavg.txt beside them, and writes DIR/report.md and DIR/accuracy_vs_length.png (a run
before it is collected; run.sh's folders). Every number is recomputed from the per-question rows. Seeds are pooled
over the same held-out questions, and the 95% interval is a percentile bootstrap that resamples seeds and documents
(the questions about one document are not independent; `posttrain.analysis.stats.seeds_items_ci`, issue 62), so
it carries the spread between seeds as well as between documents; each seed's own figure is shown beside it.
Differences are paired over the same questions. `--rows [x2:]cd=<eval.json>` adds a condition's rows from a run on
the same questions and documents (a baseline run once, elsewhere: context distillation on a CPU beside D2L's seeds on
a GPU), to every set or to one; `--docs N` keeps the questions about the first N documents (where such a baseline
ran on those only), `--docs A:B` those about documents A to B-1 (documents added to a set later, alone); `--out`
writes elsewhere. report.md's first line is the command that wrote it, with `--note` (where the runs came from)
beside it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from posttrain.algos.d2l.binding import OTHER_ENTITY
from posttrain.algos.d2l.config import EVAL_CONDITIONS
from posttrain.analysis.stats import seeds_items_ci

HERE = Path(__file__).resolve().parent
LABELS = {
    "no_context": "no context",
    "in_context": "in context (full document)",
    "in_context_truncated": "in context (truncated to the window)",
    "in_context_instructed": "in context, instructed (full document)",
    "retrieval_bm25": "BM25 sentences in the window",
    "d2l": "D2L (own document)",
    "d2l_other_doc": "D2L (other document's LoRA)",
    "d2l_other_entity": "D2L (own LoRA, other entity's question)",
    "in_context_other_entity": "in context (own document, other entity's question)",
    "format_lora": "format-only LoRA",
    "cd": "context distillation (per document)",
}
METRICS = {"accuracy": "correct", "exact_match": "em", "f1": "f1", "own_fact": "own_fact"}
COST_KEYS = {"cd": ("cd_ms_per_doc", "cd_docs"), "format_lora": ("format_lora_train_s",)}  # eval.json's, per condition
FACTS = "facts"  # the set evaluated at the end of training: the facts alone
NUMERIC_KINDS = ("org_year", "org_staff", "papers")  # facts whose answer is a number; the rest are names, places, dates
LENGTH_CONDITIONS = (
    "no_context", "in_context", "in_context_instructed", "in_context_truncated", "retrieval_bm25", "d2l",
    "d2l_other_doc", "cd",
)  # fmt: skip


def load_runs(res: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """{set: {seed: run}} for the s<seed> and s<seed>_x<k> folders of `res` that hold an eval.json."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for folder in sorted(res.iterdir()):
        m = RUN_NAME.fullmatch(folder.name)
        if not m or not (folder / "eval.json").is_file():
            continue
        out.setdefault(FACTS if m.group(2) is None else f"x{m.group(2)}", {})[int(m.group(1))] = _raw_run(folder)
    return _ordered(out)


def add_rows(sets: dict[str, dict[int, dict[str, Any]]], conds: list[str], other: Path | dict[str, Any]) -> None:
    """Give every run of `sets` the per-question rows of `conds` from another run on the same questions (its
    eval.json, or the eval dict of a run read from the CSVs): a baseline that does not depend on D2L's seed and ran
    once, elsewhere (context distillation on a CPU)."""
    label = other if isinstance(other, Path) else "the baseline's rows"
    if isinstance(other, Path):
        other = json.loads(other.read_text())
    rows = other["per_question"]
    for runs in sets.values():
        for run in runs.values():
            mine = run["eval"]["per_question"]
            if [(r["question"], r["doc_tokens"]) for r in mine] != [(r["question"], r["doc_tokens"]) for r in rows]:
                raise ValueError(f"{label}: other questions or documents than {run['name']}'s")
            for row, extra in zip(mine, rows, strict=True):
                row.update({cond: extra[cond] for cond in conds if cond in extra})  # CD: cd_max_docs only
            run["eval"]["conditions"] = [*run["eval"]["conditions"], *conds]
            run["eval"].update({k: other[k] for c in conds for k in COST_KEYS.get(c, ()) if k in other})


def rows_option(
    sets: dict[str, dict[int, dict[str, Any]]], spec: str, baselines: dict[str, dict[str, Any]] | None = None
) -> None:
    """`--rows [SET:]COND[,COND]=EVAL_JSON` (SET: facts, x2, ...; every set when left out); with `baselines` (the
    eval dicts of the runs read from the CSVs, by source name) the right-hand side names one of them instead."""
    target, _, ref = spec.partition("=")
    where, _, conds = target.rpartition(":")
    if where and where not in sets:
        raise SystemExit(f"--rows {spec}: no set {where} (have {', '.join(sets)})")
    if baselines is not None and ref not in baselines:
        raise SystemExit(f"--rows {spec}: no one-run source {ref} in the CSVs; report.py --collect {ref}=DIR adds it")
    other = Path(ref) if baselines is None else baselines[ref]
    add_rows({k: v for k, v in sets.items() if k == where or not where}, conds.split(","), other)


def _cost(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    timing = folder / "time_v.txt"
    if timing.is_file():
        text = timing.read_text()
        user = re.search(r"User time \(seconds\): ([\d.]+)", text)
        sys_ = re.search(r"System time \(seconds\): ([\d.]+)", text)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        out["cpu_s"] = float(user.group(1)) + float(sys_.group(1)) if user and sys_ else None
        out["wall"] = wall.group(1) if wall else None
        out["rss_gb"] = int(rss.group(1)) / 1e6 if rss else None
    loads = folder / "loadavg.txt"
    if loads.is_file():  # "HH:MM:SS 1min 5min 15min" per line
        one = [float(line.split()[1]) for line in loads.read_text().splitlines() if len(line.split()) > 1]
        out["load"] = (min(one), sum(one) / len(one), max(one)) if one else None
    return out


def _rows(runs: dict[int, dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Per seed, the per-question rows; checked to be the same questions in the same order for every seed."""
    rows = [run["eval"]["per_question"] for _, run in sorted(runs.items())]
    first = [r["question"] for r in rows[0]]
    for seed_rows in rows[1:]:
        if [r["question"] for r in seed_rows] != first:
            raise ValueError("the seeds were evaluated on different questions (data.seed or data.num_eval differ)")
    return rows


def pooled(runs: dict[int, dict[str, Any]], cond: str, key: str, minus: str | None = None) -> dict[str, Any] | None:
    """Mean over seeds and questions of `key` (a per-question metric; `nll` gives the token-mean answer loss) of
    `cond` (minus `minus`'s, paired); the 95% interval resamples seeds and documents (the questions about one document
    together: `seeds_items_ci`), so it carries the spread between seeds too; per-seed means."""
    rows = _rows(runs)
    conds = (cond,) if minus is None else (cond, minus)
    items = [j for j in range(len(rows[0])) if all(c in seed[j] and key in seed[j][c] for seed in rows for c in conds)]
    if not items:
        return None

    def value(seed: list[dict[str, Any]], j: int) -> float:
        v = float(seed[j][cond][key])
        return v - float(seed[j][minus][key]) if minus else v

    table = [[value(seed, j) for j in items] for seed in rows]
    # nll is a ratio: the answer-token NLL sums over their token counts
    weights = [[float(seed[j][cond]["tokens"]) if key == "nll" else 1.0 for j in items] for seed in rows]
    docs = [rows[0][j]["doc"] for j in items]
    mean, ci = seeds_items_ci(table, clusters=docs, weights=weights)
    return {
        "n": len(items),
        "docs": len(set(docs)),
        "mean": mean,
        "ci": ci,
        "seeds": [sum(t) / sum(w) for t, w in zip(table, weights, strict=True)],
    }


def cell(stat: dict[str, Any] | None, signed: bool = False) -> str:
    if stat is None:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    text = f"{f.format(stat['mean'])} [{f.format(stat['ci'][0])}, {f.format(stat['ci'][1])}]"
    if len(stat["seeds"]) > 1:
        text += f" (seeds {', '.join(f.format(s) for s in stat['seeds'])})"
    return text


def main_table(runs: dict[int, dict[str, Any]]) -> list[str]:
    present = [c for c in EVAL_CONDITIONS if any(c in run["eval"]["conditions"] for run in runs.values())]
    lines = [
        "| condition | questions (documents) | accuracy [95% CI] (per seed) | exact match | F1 "
        "| answer CE, nats/token |",
        "|---|---|---|---|---|---|",
    ]
    for cond in present:
        acc = pooled(runs, cond, "correct")
        if acc is None:
            continue
        em, f1, ce = (pooled(runs, cond, k) for k in ("em", "f1", "nll"))
        lines.append(
            f"| {LABELS[cond]} | {acc['n']} ({acc['docs']}) | {cell(acc)} | {cell(em)} | {cell(f1)} | {cell(ce)} |"
        )
    return lines


PAIRED_HEADER = "| D2L minus | questions (documents) | accuracy [paired 95% CI] | F1 [paired 95% CI] |"


def some_docs(sets: dict[str, dict[int, dict[str, Any]]], docs: slice) -> dict[str, dict[int, dict[str, Any]]]:
    """Every run restricted to the questions about the `docs` slice of its documents, in their order: the first N (a
    baseline that ran on those only, e.g. context distillation with `algo.baselines.cd_max_docs`, against the others
    on the same questions), or documents added to a set later, alone."""

    def keep(run: dict[str, Any]) -> dict[str, Any]:
        kept = list(dict.fromkeys(r["doc"] for r in run["eval"]["per_question"]))[docs]
        return _only(run, lambda r: r["doc"] in kept)

    return {name: {seed: keep(run) for seed, run in runs.items()} for name, runs in sets.items()}


def _paired_rows(runs: dict[int, dict[str, Any]], others: tuple[str, ...], prefix: str = "") -> list[str]:
    """A row per baseline of `others` that `runs` has: D2L minus it, paired by question (accuracy and F1)."""
    rows = []
    for other in others:
        acc, f1 = pooled(runs, "d2l", "correct", other), pooled(runs, "d2l", "f1", other)
        if acc is not None:
            rows.append(
                f"| {prefix}{LABELS[other]} | {acc['n']} ({acc['docs']}) | {cell(acc, True)} | {cell(f1, True)} |"
            )
    return rows


def paired_table(runs: dict[int, dict[str, Any]]) -> list[str]:
    others = (
        "no_context", "d2l_other_doc", "format_lora", "in_context_truncated", "in_context", "in_context_instructed",
        "retrieval_bm25", "cd",
    )  # fmt: skip
    return [PAIRED_HEADER, "|---|---|---|---|", *_paired_rows(runs, others)]


def long_paired_table(sets: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """D2L minus the baselines that read a long document (truncated, distilled with a truncated teacher, or whole),
    paired by question at each length beyond the facts alone: issue 27's "above truncated in context"."""
    others = ("in_context_truncated", "retrieval_bm25", "cd", "in_context", "in_context_instructed")
    rows = [row for name, runs in sets.items() if name != FACTS for row in _paired_rows(runs, others, f"{name} | ")]
    return [f"| length {PAIRED_HEADER}", "|---|---|---|---|---|", *rows] if rows else []


def hops_table(runs: dict[int, dict[str, Any]]) -> list[str]:
    lines = ["| condition | one-fact questions, accuracy | two-fact questions, accuracy |", "|---|---|---|"]
    for cond in ("no_context", "in_context", "d2l", "d2l_other_doc", "format_lora", "cd"):
        cells = []
        for hops in (1, 2):
            subset = {s: _only(run, lambda r, h=hops: r.get("hops") == h) for s, run in runs.items()}
            cells.append(cell(pooled(subset, cond, "correct")))
        if any(c != "-" for c in cells):
            lines.append(f"| {LABELS[cond]} | {cells[0]} | {cells[1]} |")
    return lines


def kind_table(runs: dict[int, dict[str, Any]]) -> list[str]:
    """By the kind of fact asked (birth date, company, number of papers...): which facts a LoRA carries, beside the
    document in context and a LoRA distilled from it per document (context distillation, same rank and layers)."""
    kinds = sorted({r["kind"] for r in _rows(runs)[0] if r.get("kind")})
    lines = [
        "| fact asked | questions | in context, accuracy | context distillation, accuracy | D2L accuracy [95% CI] "
        "| D2L F1 | D2L answer CE | other document's LoRA, answer CE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        subset = {s: _only(run, lambda r, k=kind: r.get("kind") == k) for s, run in runs.items()}
        ic, cd, acc, f1, ce, other = (
            pooled(subset, c, k)
            for c, k in (
                ("in_context", "correct"), ("cd", "correct"), ("d2l", "correct"), ("d2l", "f1"), ("d2l", "nll"),
                ("d2l_other_doc", "nll"),
            )
        )  # fmt: skip
        if ic is None and cd is None and acc is None:
            continue
        lines.append(
            f"| {kind} | {len(_rows(subset)[0])} | {_mean(ic)} | {_mean(cd)} | {cell(acc)} | {_mean(f1)} | {_mean(ce)} "
            f"| {_mean(other)} |"
        )
    return lines if len(lines) > 2 else ["(the questions carry no kind)"]


def _mean(stat: dict[str, Any] | None) -> str:
    return "-" if stat is None else f"{stat['mean']:.3f}"


def _only(run: dict[str, Any], keep: Any) -> dict[str, Any]:
    ev = dict(run["eval"], per_question=[r for r in run["eval"]["per_question"] if keep(r)])
    return dict(run, eval=ev)


CARRIERS = {"d2l": "D2L", "in_context": "in context"}  # binding.OTHER_ENTITY's own-question conditions, named


def entity_table(runs: dict[int, dict[str, Any]]) -> list[str]:
    """The same carrier of a document (its LoRA, or the document in context) asked about its own entity and about
    another document's: accuracy, own fact, and the value margins (`binding.py`); one block per carrier."""
    lines = [
        "| carrier: question asked | accuracy vs its own gold answer | states the document's answer instead | log P("
        "reply with the document's value) - log P(with the other document's), nats | share preferring the document's "
        "value |",
        "|---|---|---|---|---|",
    ]
    for own_cond, other_cond in OTHER_ENTITY.items():
        name = CARRIERS[own_cond]
        own, other = pooled(runs, own_cond, "correct"), pooled(runs, other_cond, "correct")
        if other is None:
            continue
        leak = pooled(runs, other_cond, "own_fact")
        carry, stray = (pooled(runs, c, "lora_value_margin") for c in (own_cond, other_cond))
        bound = pooled(runs, own_cond, "lora_value_margin", minus=other_cond)  # 0: no binding
        carry_n, stray_n = (pooled(runs, c, "lora_value_preferred") for c in (own_cond, other_cond))
        lines += [
            f"| {name}: about the document's entity | {cell(own)} | - | {cell(carry, True)} | {cell(carry_n)} |",
            f"| {name}: the same kind of question about another document's entity | {cell(other)} | {cell(leak)} | "
            f"{cell(stray, True)} | {cell(stray_n)} |",
            f"| {name}: binding, own question minus the other entity's (paired) | - | - | {cell(bound, True)} | - |",
        ]
    if len(lines) == 2:
        return ["(not evaluated: no *_other_entity condition in algo.eval_conditions, or the data has no kinds)"]
    return lines


def length_table(sets: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    names = list(sets)
    tokens = {s: _mean_tokens(sets[s]) for s in names}
    lines = _accuracy_table({f"{s} ({tokens[s]:.0f} tokens)": sets[s] for s in names})
    shares = []
    for s in names:
        flags = [r["in_window"] for r in _rows(sets[s])[0] if r.get("in_window") is not None]
        shares.append(f"{sum(flags) / len(flags):.3f}" if flags else "-")
    lines.append("| share of questions whose evidence lies inside the window | " + " | ".join(shares) + " |")
    return lines


def _accuracy_table(columns: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """A row per condition of LENGTH_CONDITIONS that any column has: its pooled accuracy in each column."""
    lines = ["| condition | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for cond in LENGTH_CONDITIONS:
        cells = [cell(pooled(runs, cond, "correct")) for runs in columns.values()]
        if any(c != "-" for c in cells):
            lines.append(f"| {LABELS[cond]} | " + " | ".join(cells) + " |")
    return lines


SIDES = ((True, "inside the window"), (False, "outside"))


def window_table(sets: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """Accuracy on the questions whose evidence lies inside the granted window and on those outside it, at each length
    (eval.json's `in_window`): whether a reader reads past the window, where truncation scores 0 by construction."""
    names = [s for s in sets if any(r.get("in_window") is False for r in _rows(sets[s])[0])]
    if not names:
        return []
    sides = {(s, label): _side(sets[s], inside) for s in names for inside, label in SIDES}
    return _accuracy_table({f"{s}: {label} ({_docs(runs)} documents)": runs for (s, label), runs in sides.items()})


def _side(runs: dict[int, dict[str, Any]], inside: bool) -> dict[int, dict[str, Any]]:
    return {seed: _only(run, lambda r: r.get("in_window") is inside) for seed, run in runs.items()}


def _docs(runs: dict[int, dict[str, Any]]) -> int:
    return len({r["doc"] for r in _rows(runs)[0]})


def _mean_tokens(runs: dict[int, dict[str, Any]]) -> float:
    rows = _rows(runs)[0]
    return sum(r["doc_tokens"] for r in rows) / len(rows)


def cost_table(sets: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    lines = [
        "| run | D2L internalize, ms/document | CD, ms/document (median) | format-only LoRA training, s | "
        "train steps | train runtime, s | wall (all) | CPU user+sys, s | peak RSS, GB | 1-min load min/mean/max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for runs in sets.values():
        for _, run in sorted(runs.items()):
            ev, s = run["eval"], run["summary"]
            load = run.get("load")
            values = [
                f"{ev['internalize_ms_per_doc']:.0f}",
                f"{ev['cd_ms_per_doc']:.0f} ({ev['cd_docs']} docs)" if "cd_ms_per_doc" in ev else "-",
                f"{ev['format_lora_train_s']:.0f}" if "format_lora_train_s" in ev else "-",
                str(s.get("final_step", "-")),
                f"{s['runtime_s']:.0f}" if "runtime_s" in s else "-",
                run.get("wall") or "-",
                f"{run['cpu_s']:.0f}" if run.get("cpu_s") else "-",
                f"{run['rss_gb']:.1f}" if run.get("rss_gb") else "-",
                f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}" if load else "-",
            ]
            lines.append(f"| {run['name']} | " + " | ".join(values) + " |")
    return lines


def plot(sets: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for cond in LENGTH_CONDITIONS:
        points = [(_mean_tokens(runs), pooled(runs, cond, "correct")) for runs in sets.values()]
        points = sorted((x, st) for x, st in points if st is not None)
        if not points:
            continue
        xs, stats = [p[0] for p in points], [p[1] for p in points]
        ys = [st["mean"] for st in stats]
        err = [[y - st["ci"][0] for y, st in zip(ys, stats)], [st["ci"][1] - y for y, st in zip(ys, stats)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=LABELS[cond])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("document length, tokens (mean of the set)")
    ax.set_ylabel("accuracy (mean over seeds, 95% CI over documents)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    ax.set_title("D2L on SmolLM2-135M-Instruct: accuracy vs document length")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(sets: dict[str, dict[int, dict[str, Any]]]) -> str:
    lines: list[str] = []
    if FACTS in sets:
        runs = sets[FACTS]
        ev = next(iter(runs.values()))["eval"]
        seeds = ", ".join(str(s) for s in sorted(runs))
        lines += [
            f"### Held-out documents, the facts alone (seeds {seeds}; window {ev['context_window']} tokens)",
            "",
            *main_table(runs),
            "",
            "### Paired differences (D2L minus each baseline, same questions)",
            "",
            *paired_table(runs),
            "",
            "### One-fact and two-fact questions",
            "",
            *hops_table(runs),
            "",
            "### By the fact asked",
            "",
            *kind_table(runs),
            "",
            "### Same LoRA or document, other entity",
            "",
            *entity_table(runs),
            "",
        ]
    lines += ["### Accuracy vs document length", "", *length_table(sets), ""]
    sides = window_table(sets)
    if sides:
        lines += ["### Where the evidence lies: inside the granted window or beyond it", "", *sides, ""]
    beyond = long_paired_table(sets)
    if beyond:
        lines += [
            "### Paired differences beyond the facts alone (D2L minus each baseline, same questions)",
            "",
            *beyond,
            "",
        ]
    lines += ["### Cost", "", *cost_table(sets)]
    return "\n".join(lines) + "\n"


def doc_range(text: str) -> slice:
    """`--docs`: "N" -> the first N documents, "A:B" -> documents A to B-1 (0-based, in each run's order)."""
    start, _, stop = text.rpartition(":")
    try:
        docs = slice(int(start or 0), int(stop))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: N or A:B (documents A to B-1)") from None
    if not 0 <= docs.start < docs.stop:
        raise argparse.ArgumentTypeError(f"{text!r}: no documents (need 0 <= A < B)")
    return docs


def command_line(argv: list[str], note: str | None, script: str = "experiments/d2l_smollm2/report.py") -> str:
    """report.md's first line, an HTML comment: the command (`script` with `argv`) that wrote it, its `--note` moved
    to the end."""
    args = list(argv)
    if "--note" in args:
        del args[args.index("--note") : args.index("--note") + 2]
    args = [a for a in args if not a.startswith("--note=")]
    line = shlex.join(["python", script, *args])
    return f"<!-- {line}{f' ({note})' if note else ''} -->\n\n"


# --- the compact tables: results/runs.csv, fit.csv, long.csv ---

RESULTS = HERE / "results"
REPO_RESULTS = "experiments/d2l_smollm2/results"  # RESULTS as the commands name it, from the repository root
RUN_NAME = re.compile(r"s(\d+)(?:_x(\d+))?")
ONE_RUN = "-"  # the `run` of a source that is one run (a baseline)
NOT_SCORED = "-"  # the `condition` of a question's one row where the run scored it under none (CD's cd_max_docs)
BASE = "gpu_seeds_2026-11-27_h200/cpu_baselines"
BASELINES = (  # under BASE: the CPU runs that read no hypernet, paired with the seeds of the long documents
    "facts_format_lora", "x2_48docs", "x2_cd_48docs", "x4_48docs", "x4_full_48docs", "x4_cd_48docs", "x8_48docs",
    "x8_full_48docs", "x2_96docs", "x4_96docs",
)  # fmt: skip
BASE_62 = "cpu_2026-12-03_baselines"  # issue 62's instructed and retrieval baselines (its run.sh), source <name>_b62
BASELINES_62 = (  # every run of its run.sh
    "fact1", "facts3", "x2_96docs", "x4_96docs", "x8_48docs", "x4_48docs_instructed", "x8_48docs_instructed",
    "fact1_cd300",
)  # fmt: skip
# what the report reads: name -> its raw folder under results/ (not in git since 2026-12-01)
SOURCES: dict[str, str] = {
    "fact1": "gpu_seeds_2026-11-27_h200/fact1",
    "facts3": "cpu_2026-11-28_facts3_from_fact1_chunks/longer/unseen/more",
    "chunks48": "gpu_2026-11-28_h200/fact1_chunks_cpu",
    "chunks96": "gpu_2026-11-28_h200/fact1_chunks_cpu_96docs",
    "chunks32": "cpu_2026-11-28_fact1_chunks32",
    "cd_one_fact_48docs": "probes/cd_one_fact_48docs",
    "cd_three_facts_48docs": "probes/cd_three_facts_48docs",
    **{name: f"{BASE}/{name}" for name in BASELINES},
    **{f"{name}_b62": f"{BASE_62}/{name}" for name in BASELINES_62},
}
RUN_COLUMNS = (
    "source", "path", "run", "seed", "set", "questions", "conditions", "context_window", "internalize_ms_per_doc",
    "cd_ms_per_doc", "cd_docs", "format_lora_train_s", "final_step", "runtime_s", "wall", "cpu_s", "rss_gb",
    "load_min", "load_mean", "load_max", "commit",
)  # fmt: skip
EVAL_KEYS = {"context_window": int, "internalize_ms_per_doc": float, "cd_ms_per_doc": float, "cd_docs": int,
             "format_lora_train_s": float}  # fmt: skip
SUMMARY_KEYS = {"final_step": int, "runtime_s": float}
ITEM_COLUMNS = {"fit": ("doc", "kind", "hops", "doc_tokens", "in_window"), "long": ("doc", "doc_tokens", "in_window")}
METRIC_COLUMNS = {
    "fit": ("correct", "em", "f1", "nll", "tokens", "own_fact", "lora_value_margin", "lora_value_preferred"),
    "long": ("correct", "f1", "nll", "tokens"),
}


def score_columns(table: str) -> tuple[str, ...]:
    return ("source", "run", "item", *ITEM_COLUMNS[table], "condition", *METRIC_COLUMNS[table])


def _raw_run(folder: Path) -> dict[str, Any]:
    """One run folder: its eval.json, summary.json and cost files, as report.py's functions read a run."""
    run: dict[str, Any] = {"name": folder.name, "eval": json.loads((folder / "eval.json").read_text())}
    summary = folder / "summary.json"
    run["summary"] = json.loads(summary.read_text()) if summary.is_file() else {}
    run.update(_cost(folder))
    return run


def _set_of(folder: Path, name: str, ev: dict[str, Any]) -> str:
    """facts (the documents that fit) or x<k> (among filler, k x the window): from the name of an s<seed>[_x<k>] run,
    else from its config.yaml's data.params.eval_doc_tokens."""
    m = RUN_NAME.fullmatch(name)
    if m:
        return FACTS if m.group(2) is None else f"x{m.group(2)}"
    config = folder / "config.yaml"
    found = re.search(r"^\s*eval_doc_tokens:\s*(\d+)\s*$", config.read_text(), re.M) if config.is_file() else None
    tokens = int(found.group(1)) if found else 0
    return f"x{tokens // (ev.get('context_window') or 512)}" if tokens else FACTS


def _commit(path: Path) -> str:
    """The commit that last wrote `path` (7 hex digits), '' outside git or where it never was."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", path.name], cwd=path.parent, capture_output=True, text=True
        )
    except OSError:
        return ""
    return out.stdout.strip()[:7] if out.returncode == 0 else ""


def _num(value: Any) -> str:
    """A per-question value for the CSV: 6 significant digits for floats, 1/0 for booleans, '' for none."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _exact(value: Any) -> str:
    """A run-level value for the CSV, to the last digit."""
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def fingerprint(rows: list[dict[str, Any]]) -> str:
    """12 hex digits of the run's question list: runs paired by question must have the same."""
    return hashlib.sha1("\n".join(r["question"] for r in rows).encode()).hexdigest()[:12]


def _relative(folder: Path) -> str:
    try:
        return folder.resolve().relative_to(RESULTS.resolve()).as_posix()
    except ValueError:
        return str(folder)


def collect_source(name: str, folder: Path) -> dict[str, list[list[str]]]:
    """The CSV rows ({runs, fit, long}) of one source folder: a run group (s<seed>[_x<k>]/ runs, the seeds of a set
    checked to ask the same questions) or one run."""
    if (folder / "eval.json").is_file():
        runs = [(ONE_RUN, folder, _raw_run(folder))]
    else:
        sets = load_runs(folder)
        for seeds in sets.values():
            _rows(seeds)
        runs = [(run["name"], folder / run["name"], run) for seeds in sets.values() for _, run in sorted(seeds.items())]
    if not runs:
        raise SystemExit(f"{folder}: no eval.json, and no s<seed>[_x<k>]/eval.json")
    out: dict[str, list[list[str]]] = {"runs": [], "fit": [], "long": []}
    for run_name, run_dir, run in runs:
        ev, summary, load = run["eval"], run["summary"], run.get("load") or (None, None, None)
        rows = ev["per_question"]
        the_set = _set_of(run_dir, run_name, ev)
        m = RUN_NAME.fullmatch(run_name)
        values = {
            "source": name, "path": _relative(folder), "run": run_name, "seed": m.group(1) if m else "",
            "set": the_set, "questions": fingerprint(rows), "conditions": ";".join(ev.get("conditions", [])),
            **{k: ev.get(k) for k in EVAL_KEYS}, **{k: summary.get(k) for k in SUMMARY_KEYS},
            "wall": run.get("wall"), "cpu_s": run.get("cpu_s"), "rss_gb": run.get("rss_gb"),
            "load_min": load[0], "load_mean": load[1], "load_max": load[2], "commit": _commit(run_dir / "eval.json"),
        }  # fmt: skip
        out["runs"].append([_exact(values[c]) for c in RUN_COLUMNS])
        table = "fit" if the_set == FACTS else "long"
        for item, r in enumerate(rows):
            meta = {"doc": r["doc"], "kind": r.get("kind"), "hops": r.get("hops"), "doc_tokens": r["doc_tokens"]}
            meta["in_window"] = r.get("in_window")
            conds = [c for c, v in r.items() if isinstance(v, dict) and (table == "fit" or c in LENGTH_CONDITIONS)]
            if not conds and "cd" not in ev.get("conditions", []):
                raise ValueError(f"{run_dir}: question {item} has no condition for {table}.csv")
            for cond in conds or [NOT_SCORED]:  # CD with algo.baselines.cd_max_docs scores the first documents only
                out[table].append(
                    [name, run_name, str(item), *(_num(meta[c]) for c in ITEM_COLUMNS[table]), cond,
                     *(_num(r[cond].get(k)) if cond in r else "" for k in METRIC_COLUMNS[table])]
                )  # fmt: skip
    return out


def _csv_paths(csv_dir: Path) -> dict[str, Path]:
    return {t: csv_dir / f"{t}.csv" for t in ("runs", "fit", "long")}


def _header(table: str) -> tuple[str, ...]:
    return RUN_COLUMNS if table == "runs" else score_columns(table)


def collect(specs: list[str], csv_dir: Path = RESULTS, results: Path = RESULTS) -> dict[str, Path]:
    """`--collect`: SOURCES' folders under `results` (no `specs`: the CSVs written anew) or NAME=DIR each (those
    sources added to the CSVs, or put in place of the rows they had); the CSVs written."""
    if specs:
        bad = [s for s in specs if "=" not in s]
        if bad:
            raise SystemExit(f"--collect {bad[0]}: expected NAME=DIR")
        sources = {n: Path(d) for n, _, d in (s.partition("=") for s in specs)}
    else:
        sources = {n: results / p for n, p in SOURCES.items()}
    missing = [f"{n} ({d})" for n, d in sources.items() if not d.is_dir()]
    if missing:
        raise SystemExit(f"--collect: no such folder: {', '.join(missing)}")
    paths = _csv_paths(csv_dir)
    kept: dict[str, list[list[str]]] = {t: [] for t in paths}
    if specs:  # the other sources' rows stay
        for t, path in paths.items():
            if path.is_file():
                with path.open(newline="") as f:
                    kept[t] = [row for row in list(csv.reader(f))[1:] if row[0] not in sources]
    for name, folder in sources.items():
        for t, rows in collect_source(name, folder).items():
            kept[t] += rows
    csv_dir.mkdir(parents=True, exist_ok=True)
    for t, path in paths.items():
        with path.open("w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(_header(t))
            writer.writerows(kept[t])
    return paths


def _value(text: str, kind: Any) -> Any:
    return kind(text) if text != "" else None


def _doc(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def read_tables(csv_dir: Path = RESULTS) -> dict[str, dict[str, dict[str, Any]]]:
    """{source: {run name: run}} from the CSVs, each run as `--results` reads it from its folder (per-question rows in
    eval.json's order; a row's `question` is the run's question fingerprint and its index) plus `set` and `path`."""
    paths = _csv_paths(csv_dir)
    absent = [p.name for p in paths.values() if not p.is_file()]
    if absent:
        raise SystemExit(f"{csv_dir}: no {', '.join(absent)} (report.py --collect writes them from raw run folders)")
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    with paths["runs"].open(newline="") as f:
        for row in csv.DictReader(f):
            ev: dict[str, Any] = {"conditions": row["conditions"].split(";") if row["conditions"] else []}
            ev.update({k: _value(row[k], kind) for k, kind in EVAL_KEYS.items() if row[k] != ""})
            summary = {k: _value(row[k], kind) for k, kind in SUMMARY_KEYS.items() if row[k] != ""}
            run: dict[str, Any] = {"name": row["run"] if row["run"] != ONE_RUN else row["source"], "eval": ev}
            run.update(summary=summary, set=row["set"], path=row["path"], questions=row["questions"])
            run.update(commit=row["commit"], items={})
            for key, kind in (("wall", str), ("cpu_s", float), ("rss_gb", float)):
                if row[key] != "":
                    run[key] = kind(row[key])
            if row["load_min"] != "":
                run["load"] = tuple(float(row[k]) for k in ("load_min", "load_mean", "load_max"))
            tables.setdefault(row["source"], {})[row["run"]] = run
    for table in ("fit", "long"):
        with paths[table].open(newline="") as f:
            for row in csv.DictReader(f):
                run = tables[row["source"]][row["run"]]
                item = int(row["item"])
                if item not in run["items"]:
                    q: dict[str, Any] = {"doc": _doc(row["doc"]), "question": f"{run['questions']}#{item}"}
                    q["doc_tokens"] = int(row["doc_tokens"])
                    if row.get("kind"):
                        q["kind"] = row["kind"]
                    if row.get("hops"):
                        q["hops"] = int(row["hops"])
                    if row["in_window"] != "":
                        q["in_window"] = row["in_window"] == "1"
                    run["items"][item] = q
                if row["condition"] == NOT_SCORED:
                    continue
                metrics = {k: float(row[k]) for k in METRIC_COLUMNS[table] if row[k] != "" and k != "tokens"}
                if row["tokens"] != "":
                    metrics["tokens"] = int(row["tokens"])
                run["items"][item][row["condition"]] = metrics
    for runs in tables.values():
        for run in runs.values():
            items = run.pop("items")
            if sorted(items) != list(range(len(items))):
                raise ValueError(f"{run['path']} {run['name']}: questions missing from the CSVs")
            run["eval"]["per_question"] = [items[j] for j in range(len(items))]
    return tables


def group_sets(tables: dict[str, dict[str, dict[str, Any]]], source: str) -> dict[str, dict[int, dict[str, Any]]]:
    """A run group of the CSVs as `load_runs` reads its folder: {set: {seed: run}}, the facts alone first."""
    if source not in tables:
        raise SystemExit(f"{source}: not in the CSVs (have {', '.join(tables)}); report.py --collect adds it")
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for name, run in tables[source].items():
        m = RUN_NAME.fullmatch(name)
        if not m:
            raise SystemExit(f"{source}: one run, not a group of s<seed>[_x<k>] runs")
        out.setdefault(run["set"], {})[int(m.group(1))] = json.loads(json.dumps(run))  # a copy: --rows adds to it
    return _ordered(out)


def baselines(tables: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The eval of each source that is one run, by source name: what `--rows` pairs with every seed."""
    return {source: runs[ONE_RUN]["eval"] for source, runs in tables.items() if ONE_RUN in runs}


def _ordered(sets: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[int, dict[str, Any]]]:
    order = {FACTS: 0}
    return dict(sorted(sets.items(), key=lambda kv: order.get(kv[0], int(kv[0][1:]) if kv[0][1:].isdigit() else 99)))


class Section(NamedTuple):
    """One section of results/report.md: a run group with baselines paired by `rows` (`--rows` with a source of the
    CSVs on the right) and `docs` (`--docs`), as `--results` reported the raw folders."""

    key: str
    title: str
    source: str
    rows: tuple[str, ...] = ()
    docs: str = ""
    note: str = ""


ONE_FACT_BASE = "facts:no_context,in_context,cd=cd_one_fact_48docs"
FULL_48 = (
    "x4:in_context=x4_full_48docs", "x8:in_context=x8_full_48docs",
    "x8:retrieval_bm25=x8_48docs_b62", "x4:in_context_instructed=x4_48docs_instructed_b62",
    "x8:in_context_instructed=x8_48docs_instructed_b62",
)  # fmt: skip
ROWS_96 = (
    "x2:no_context,in_context,in_context_truncated=x2_96docs", "x4:no_context,in_context_truncated=x4_96docs",
    "x2:in_context_instructed,retrieval_bm25=x2_96docs_b62", "x4:retrieval_bm25=x4_96docs_b62",
)  # fmt: skip
SECTIONS = (
    Section(
        "fact1", "One-fact documents that fit: the H200's fact1 hypernets, seeds 0-2", "fact1",
        ("cd=cd_one_fact_48docs", "format_lora=facts_format_lora", "in_context_instructed,retrieval_bm25=fact1_b62"),
        note="D2L trained and evaluated on one H200 in bf16 (2026-11-26 and 2026-11-27: `gpu_scale.py` arm fact1, "
        "seed 0 stopped at step 1,750 of a 2,400-step cosine, seeds 1 and 2 at 1,454 and 1,549); context "
        "distillation and the format-only LoRA once on the CPU in fp32",
    ),
    Section(
        "fact1_cd300", "One-fact documents that fit, the first 24: context distillation at 300 steps", "fact1",
        ("cd=fact1_cd300_b62",), "24",
        note="The fact1 hypernets above against context distillation at the D2L paper's 300 steps per document (the "
        "other CD rows ran 100) on the first 24 of the 48 documents (its CPU cost), once on the CPU in fp32 "
        "(2026-12-04: `cpu_2026-12-03_baselines/run.sh fact1_cd300`)",
    ),
    Section(
        "facts3", "Three-fact documents: the fact1_chunks hypernets after 3,800 CPU steps on 3-fact documents",
        "facts3",
        ("in_context,cd=cd_three_facts_48docs", "in_context_instructed,retrieval_bm25=facts3_b62"),
        note="Each seed's H200 fact1_chunks hypernet, then 500 + 300 + 1,000 CPU steps on 3-fact documents read one "
        "sentence per chunk and 2 x 1,000 on documents none of them had read (2026-11-28 and 2026-11-29: "
        "`cpu_2026-11-28_facts3_from_fact1_chunks/run.sh`, stages 1, 2, 3, 5, 6); in context and CD once on the CPU",
    ),
    Section(
        "chunks48", "Beyond the window on 48 documents: the H200's fact1_chunks hypernets at every length", "chunks48",
        (ONE_FACT_BASE, "x2:no_context,in_context,in_context_truncated=x2_48docs", "x2:cd=x2_cd_48docs",
         "x4:no_context,in_context_truncated=x4_48docs", "x8:no_context,in_context_truncated=x8_48docs", *FULL_48,
         "x4:cd=x4_cd_48docs"),
        note="Seeds 0-2 stopped at step 1,050 of a 1,600-step cosine on one H200 (2026-11-28: "
        "`gpu_2026-11-28_h200/run.sh train`), evaluated on the CPU in fp32 (`run.sh evaluate` there); the baselines "
        "that read no hypernet once on the CPU (`gpu_seeds_2026-11-27_h200/cpu_baselines/run_48docs.sh`)",
    ),
    Section(
        "chunks96", "2x and 4x the window on 96 documents: the same hypernets", "chunks96", ROWS_96,
        note="The 48 documents above and the next 48 of the same generator (2026-11-28, evening: "
        "`gpu_2026-11-28_h200/fact1_chunks_cpu_96docs/run.sh`)",
    ),
    Section(
        "chunks96_new48", "2x and 4x, the 48 documents added (documents 48-95) alone", "chunks96", ROWS_96, "48:96",
        note="The replication: documents that did not decide when to stop",
    ),
    Section(
        "chunks32", "The facts alone, 4x and 8x after 64 CPU steps on documents of up to 32 chunks", "chunks32",
        (ONE_FACT_BASE, "x4:no_context,in_context_truncated=x4_48docs", "x8:no_context,in_context_truncated=x8_48docs",
         *FULL_48),
        note="Each seed's H200 fact1_chunks hypernet, 64 steps more on the arm fact1_chunks32 (2026-11-28, night: "
        "`cpu_2026-11-28_fact1_chunks32/run.sh`)",
    ),
)  # fmt: skip
PLOTS = {"accuracy_vs_length.png": "chunks48", "accuracy_vs_length_chunks32.png": "chunks32"}


def section_sets(
    tables: dict[str, dict[str, dict[str, Any]]], section: Section
) -> dict[str, dict[int, dict[str, Any]]]:
    sets = group_sets(tables, section.source)
    base = baselines(tables)
    for spec in section.rows:
        rows_option(sets, spec, base)
    return some_docs(sets, doc_range(section.docs)) if section.docs else sets


def raw_command(tables: dict[str, dict[str, dict[str, Any]]], section: Section) -> str:
    """The `--results` command that printed the section from the raw folders."""

    def path(source: str) -> str:
        return f"{REPO_RESULTS}/{next(iter(tables[source].values()))['path']}"

    args = ["--results", path(section.source)]
    for spec in section.rows:
        target, _, source = spec.partition("=")
        args += ["--rows", f"{target}={path(source)}/eval.json"]
    args += ["--docs", section.docs] if section.docs else []
    return shlex.join(["python", "experiments/d2l_smollm2/report.py", *args])


def _two_digits(x: float) -> str:
    """A ratio to two significant digits, as the README gives them (359.0 -> 360)."""
    return f"{float(f'{x:.2g}'):.0f}"


def must_show_table(built: dict[str, dict[str, dict[int, dict[str, Any]]]]) -> list[str]:
    """Issue 27's must-shows, each from its section: D2L's share of in context on documents that fit, D2L minus
    context distillation (paired) beside their times per document, and D2L minus truncated in context beyond the
    window (paired). README.md's status table is this table."""
    lines = ["| must-show | documents | result | status |", "|---|---|---|---|"]
    fits = (("fact1", "one fact, 48 (D2L on the H200)"), ("facts3", "three facts, 48 (D2L on the CPU)"))
    for key, label in fits:
        runs = built[key][FACTS]
        d2l, ic = pooled(runs, "d2l", "correct"), pooled(runs, "in_context", "correct")
        assert d2l is not None and ic is not None
        share, low, seed = d2l["mean"] / ic["mean"], d2l["ci"][0] / ic["mean"], min(d2l["seeds"]) / ic["mean"]
        lines.append(
            f"| D2L >= 60% of in context, 3 seeds | {label} | D2L {cell(d2l)} against in context {ic['mean']:.3f}: "
            f"**{share:.0%}** (lowest seed {seed:.0%}, the CI's lower end {low:.0%}) | "
            f"{'met' if share >= 0.6 else 'not met'} |"
        )
    for numeric, label in ((True, "numbers (year, head count, papers)"), (False, "names, places and dates")):
        runs = {
            s: _only(run, lambda r, n=numeric: (r.get("kind") in NUMERIC_KINDS) is n)
            for s, run in built["facts3"][FACTS].items()
        }
        d2l, ic = pooled(runs, "d2l", "correct"), pooled(runs, "in_context", "correct")
        assert d2l is not None and ic is not None
        lines.append(
            f"| the same, split by the fact asked (issue 62) | three facts: {label}, {len(_rows(runs)[0])} questions "
            f"| D2L {cell(d2l)} against in context {ic['mean']:.3f}: **{d2l['mean'] / ic['mean']:.0%}** | "
            f"{'met' if d2l['mean'] >= 0.6 * ic['mean'] else 'not met'} |"
        )
    cd_300 = ("fact1_cd300", "one fact, the first 24, CD at 300 steps (issue 62)")
    for key, label in (*fits, cd_300):
        runs = built[key][FACTS]
        diff, cd = pooled(runs, "d2l", "correct", minus="cd"), pooled(runs, "cd", "correct")
        assert diff is not None and cd is not None
        d2l_ms = [run["eval"]["internalize_ms_per_doc"] for run in runs.values()]
        cd_ms = next(iter(runs.values()))["eval"]["cd_ms_per_doc"]
        within = diff["ci"][0] <= 0 <= diff["ci"][1]
        fast = cd_ms / max(d2l_ms) >= 100
        status = "met" if within and fast else "not met: " + ("within CD's CI" if within else "below CD's CI")
        also = ""
        if key == cd_300[0]:  # the 100-step CD of the fact1 section, on the same documents
            same = some_docs(built["fact1"], doc_range(next(s.docs for s in SECTIONS if s.key == key)))[FACTS]
            also = f"; at 100 steps {_mean(pooled(same, 'cd', 'correct'))}"
        lines.append(
            f"| within context distillation's CI, at >= 100x less time per document | {label} | D2L minus CD, "
            f"paired: **{cell(diff, True)}** (CD {cd['mean']:.3f}{also}); CD {cd_ms / 1000:.1f} s per document, D2L "
            f"{min(d2l_ms):.0f}-{max(d2l_ms):.0f} ms: {_two_digits(cd_ms / max(d2l_ms))}-"
            f"{_two_digits(cd_ms / min(d2l_ms))}x | {status} |"
        )
    beyond = (("chunks96", "x2", "96"), ("chunks96", "x4", "96"), ("chunks32", "x8", "48, after 32-chunk training"))
    for key, length, docs in beyond:
        runs = built[key][length]
        diff, d2l, cut = _against(runs, "in_context_truncated")
        lines.append(
            f"| above truncated in context beyond the {_window(runs)}-token window | {length} "
            f"({_mean_tokens(runs):.0f} tokens), {docs} | D2L minus truncated, paired: **{cell(diff, True)}** (D2L "
            f"{d2l['mean']:.3f}, truncated {cut['mean']:.3f}) | {'met' if diff['ci'][0] > 0 else 'not met'} |"
        )
    whole = (("chunks96", "x2", "96"), ("chunks48", "x4", "48"), ("chunks32", "x8", "48"))
    rivals = (  # issue 62's baselines: (condition, the must-show's words, (section, set, documents) ...)
        ("in_context", "the whole document in context", whole),
        ("in_context_instructed", "an instructed prompt with the whole document",
         (("fact1", FACTS, "one fact, 48"), ("facts3", FACTS, "three facts, 48"), *whole)),
        ("retrieval_bm25", "BM25 retrieval of sentences into the window",
         (("chunks96", "x2", "96"), ("chunks96", "x4", "96"), ("chunks32", "x8", "48"))),
    )  # fmt: skip
    for baseline, words, where in rivals:
        for key, length, docs in where:
            runs = built[key][length]  # the whole document fits SmolLM2's 8,192 positions at every length
            if not any(baseline in run["eval"]["conditions"] for run in runs.values()):
                continue  # not run yet (cpu_2026-12-03_baselines/run.sh)
            diff, d2l, base = _against(runs, baseline)
            size = docs if length == FACTS else f"{length} ({_mean_tokens(runs):.0f} tokens), {docs}"
            lines.append(
                f"| against {words} (issue 62) | {size} | D2L minus {LABELS[baseline]}, paired: "
                f"**{cell(diff, True)}** (D2L {d2l['mean']:.3f}, baseline {base['mean']:.3f}) | "
                f"{'above' if diff['ci'][0] > 0 else 'below' if diff['ci'][1] < 0 else 'level'} |"
            )
    plots = ", ".join(f"`{name}` ({PLOT_TITLES[name]})" for name in PLOTS)
    lines.append(f"| accuracy vs document length, plotted | 48 | {plots} | done |")
    return lines


def _against(runs: dict[int, dict[str, Any]], baseline: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """D2L minus `baseline` (paired), D2L's accuracy and the baseline's, pooled over the seeds."""
    diff = pooled(runs, "d2l", "correct", minus=baseline)
    d2l, base = pooled(runs, "d2l", "correct"), pooled(runs, baseline, "correct")
    assert diff is not None and d2l is not None and base is not None
    return diff, d2l, base


PLOT_TITLES = {"accuracy_vs_length.png": "fact1_chunks", "accuracy_vs_length_chunks32.png": "after 32-chunk training"}


def _window(runs: dict[int, dict[str, Any]]) -> int:
    return int(next(iter(runs.values()))["eval"]["context_window"])


def data_table(tables: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["| source | its raw folder under results/ | runs | questions per run | eval.json committed at |"]
    lines.append("|---|---|---|---|---|")
    for source, runs in tables.items():
        first = next(iter(runs.values()))
        counts = sorted({len(run["eval"]["per_question"]) for run in runs.values()})
        commits = sorted({run["commit"] for run in runs.values() if run["commit"]})
        names = ", ".join(runs) if ONE_RUN not in runs else "one run"
        lines.append(
            f"| {source} | `{first['path']}` | {names} | {', '.join(map(str, counts))} | {', '.join(commits) or '-'} |"
        )
    return lines


def csv_report(tables: dict[str, dict[str, dict[str, Any]]]) -> tuple[str, dict[str, dict[str, dict[int, Any]]]]:
    """results/report.md (less its first line) and each section's sets."""
    built = {section.key: section_sets(tables, section) for section in SECTIONS}
    parts = [
        "# experiments/d2l_smollm2 (D2L on SmolLM2-135M-Instruct): results/runs.csv, fit.csv and long.csv",
        "",
        "Accuracy: a gold answer as whole words in the reply. Means over 3 seeds and the questions; 95% CIs are "
        "percentile bootstraps that resample seeds and documents (the questions about one document together); "
        "paired differences are over the same questions; the seeds' own numbers in parentheses. Baselines that read "
        "no hypernet ran once and are paired with every seed.",
        "",
        "## Issue 27's must-shows",
        "",
        *must_show_table(built),
        "",
        "## Data",
        "",
        *data_table(tables),
        "",
    ]
    for section in SECTIONS:
        parts += [f"## {section.title}", "", f"{section.note}. From the raw folders (before 2026-12-01):", ""]
        parts += [f"    {raw_command(tables, section)}", "", report(built[section.key]).rstrip("\n"), ""]
    return "\n".join(parts), built


def _without_out(argv: list[str]) -> list[str]:
    args = list(argv)
    if "--out" in args:
        del args[args.index("--out") : args.index("--out") + 2]
    return [a for a in args if not a.startswith("--out=")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collect", nargs="*", metavar="NAME=DIR", help="raw run folders -> the CSVs (see above)")
    parser.add_argument("--csv-dir", type=Path, default=RESULTS, help="where the CSVs are (default: results/)")
    parser.add_argument("--results", type=Path, help="report one raw folder of s<seed>[_x<k>] runs instead")
    parser.add_argument(
        "--rows", action="append", default=[], metavar="[SET:]COND[,COND]=EVAL_JSON", help="rows from another run"
    )
    parser.add_argument(
        "--docs",
        type=doc_range,
        help="only the questions about each run's first N documents (N), or documents A to B-1 in its order (A:B)",
    )
    parser.add_argument("--out", type=Path, help="where report.md and the plots go (default: results/ or --results)")
    parser.add_argument("--note", help="where the runs came from, written beside the command atop report.md")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.collect is not None:
        for path in collect(args.collect, args.csv_dir).values():
            print(f"written: {path} ({path.stat().st_size:,} bytes)")
        return
    if args.results is None:
        if args.rows or args.docs or args.note:
            parser.error("--rows, --docs and --note go with --results (the report of the CSVs has its own)")
        out = args.out or args.csv_dir
        text, built = csv_report(read_tables(args.csv_dir))
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(command_line(_without_out(given), None) + text)
        for name, key in PLOTS.items():
            plot(built[key], out / name)
        print(text)
        print(f"written: {out / 'report.md'}, " + ", ".join(str(out / name) for name in PLOTS))
        return
    out = args.out or args.results
    sets = load_runs(args.results)
    if not sets:
        raise SystemExit(f"{args.results}: no s<seed>[_x<k>]/eval.json")
    for spec in args.rows:
        rows_option(sets, spec)
    if args.docs:
        sets = some_docs(sets, args.docs)
    text = report(sets)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(command_line(given, args.note) + text)
    plot(sets, out / "accuracy_vs_length.png")
    print(text)
    print(f"written: {out / 'report.md'}, {out / 'accuracy_vs_length.png'}")


if __name__ == "__main__":
    main()
