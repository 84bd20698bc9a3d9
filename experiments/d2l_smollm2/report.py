"""Tables and the accuracy-vs-length plot of experiments/d2l_smollm2 from the files its runs leave (run.sh):

    python experiments/d2l_smollm2/report.py                       # results/open_facts -> report.md + png
    python experiments/d2l_smollm2/report.py --results <dir>       # e.g. runs/d2l_smollm2_tiny/results

Reads <dir>/s<seed>/eval.json (the held-out documents, the facts alone, evaluated after training) and
<dir>/s<seed>_x<k>/eval.json (the same documents and questions among filler, k x the context window), with
summary.json, time_v.txt and loadavg.txt beside them. Every number is recomputed from the per-question rows of
eval.json. Seeds are pooled question by question (the held-out questions are the same for every seed): a question's
value is its mean over the seeds, and the 95% interval is a percentile bootstrap that resamples documents (the
questions about one document are not independent; `posttrain.analysis.stats.bootstrap_ci`); the spread between
seeds is shown beside it. Differences are paired over the same questions. Writes <dir>/report.md and
<dir>/accuracy_vs_length.png. `--rows [x2:]cd=<eval.json>` adds a condition's rows from a run on the same questions and
documents (a baseline run once, elsewhere: context distillation on a CPU beside D2L's seeds on a GPU), to every set
or to one; `--docs N` keeps the questions about the first N documents (where such a baseline ran on those only),
`--docs A:B` those about documents A to B-1 (documents added to a set later, alone); `--out` writes elsewhere.
report.md's first line is the command that wrote it, with `--note` (where the runs came from) beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from posttrain.algos.d2l.binding import OTHER_ENTITY
from posttrain.algos.d2l.config import EVAL_CONDITIONS
from posttrain.analysis.stats import bootstrap_ci

HERE = Path(__file__).resolve().parent
LABELS = {
    "no_context": "no context",
    "in_context": "in context (full document)",
    "in_context_truncated": "in context (truncated to the window)",
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
LENGTH_CONDITIONS = ("no_context", "in_context", "in_context_truncated", "d2l", "d2l_other_doc", "cd")


def load_runs(res: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """{set: {seed: run}} for the s<seed> and s<seed>_x<k> folders of `res` that hold an eval.json."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for folder in sorted(res.iterdir()):
        m = re.fullmatch(r"s(\d+)(?:_x(\d+))?", folder.name)
        if not m or not (folder / "eval.json").is_file():
            continue
        run: dict[str, Any] = {"name": folder.name, "eval": json.loads((folder / "eval.json").read_text())}
        summary = folder / "summary.json"
        run["summary"] = json.loads(summary.read_text()) if summary.is_file() else {}
        run.update(_cost(folder))
        out.setdefault(FACTS if m.group(2) is None else f"x{m.group(2)}", {})[int(m.group(1))] = run
    order = {FACTS: 0}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], int(kv[0][1:]) if kv[0][1:].isdigit() else 99)))


def add_rows(sets: dict[str, dict[int, dict[str, Any]]], conds: list[str], eval_json: Path) -> None:
    """Give every run of `sets` the per-question rows of `conds` from another run's eval.json on the same questions:
    a baseline that does not depend on D2L's seed and ran once, elsewhere (context distillation on a CPU)."""
    other = json.loads(eval_json.read_text())
    rows = other["per_question"]
    for runs in sets.values():
        for run in runs.values():
            mine = run["eval"]["per_question"]
            if [(r["question"], r["doc_tokens"]) for r in mine] != [(r["question"], r["doc_tokens"]) for r in rows]:
                raise ValueError(f"{eval_json}: other questions or documents than {run['name']}'s")
            for row, extra in zip(mine, rows, strict=True):
                row.update({cond: extra[cond] for cond in conds if cond in extra})  # CD: cd_max_docs only
            run["eval"]["conditions"] = [*run["eval"]["conditions"], *conds]
            run["eval"].update({k: other[k] for c in conds for k in COST_KEYS.get(c, ()) if k in other})


def rows_option(sets: dict[str, dict[int, dict[str, Any]]], spec: str) -> None:
    """`--rows [SET:]COND[,COND]=EVAL_JSON` (SET: facts, x2, ...; every set when left out)."""
    target, _, path = spec.partition("=")
    where, _, conds = target.rpartition(":")
    if where and where not in sets:
        raise SystemExit(f"--rows {spec}: no set {where} (have {', '.join(sets)})")
    add_rows({k: v for k, v in sets.items() if k == where or not where}, conds.split(","), Path(path))


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
    """Mean over questions of `key` (a per-question metric; `nll` gives the token-mean answer loss) of `cond`
    (minus `minus`'s, paired), each question averaged over the seeds; 95% CI resampling documents; per-seed means."""
    rows = _rows(runs)
    conds = (cond,) if minus is None else (cond, minus)
    items = [j for j in range(len(rows[0])) if all(c in seed[j] and key in seed[j][c] for seed in rows for c in conds)]
    if not items:
        return None

    def value(seed: list[dict[str, Any]], j: int) -> float:
        v = float(seed[j][cond][key])
        return v - float(seed[j][minus][key]) if minus else v

    if key == "nll":  # a ratio: NLL sums over answer tokens
        weights = [statistics.mean(float(seed[j][cond]["tokens"]) for seed in rows) for j in items]
    else:
        weights = [1.0] * len(items)
    values = [statistics.mean(value(seed, j) for seed in rows) for j in items]
    docs = [rows[0][j]["doc"] for j in items]
    per_seed = [sum(value(seed, j) for j in items) / sum(weights) for seed in rows]
    return {
        "n": len(items),
        "docs": len(set(docs)),
        "mean": sum(values) / sum(weights),
        "ci": bootstrap_ci(values, weights, clusters=docs),
        "seeds": per_seed,
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
    others = ("no_context", "d2l_other_doc", "format_lora", "in_context_truncated", "in_context", "cd")
    return [PAIRED_HEADER, "|---|---|---|---|", *_paired_rows(runs, others)]


def long_paired_table(sets: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """D2L minus the baselines that read a long document (truncated, distilled with a truncated teacher, or whole),
    paired by question at each length beyond the facts alone: issue 27's "above truncated in context"."""
    others = ("in_context_truncated", "cd", "in_context")
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=HERE / "results" / "open_facts")
    parser.add_argument(
        "--rows", action="append", default=[], metavar="[SET:]COND[,COND]=EVAL_JSON", help="rows from another run"
    )
    parser.add_argument(
        "--docs",
        type=doc_range,
        help="only the questions about each run's first N documents (N), or documents A to B-1 in its order (A:B)",
    )
    parser.add_argument("--out", type=Path, help="where report.md and the plot go (default: --results)")
    parser.add_argument("--note", help="where the runs came from, written beside the command atop report.md")
    args = parser.parse_args(argv)
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
    (out / "report.md").write_text(command_line(sys.argv[1:] if argv is None else argv, args.note) + text)
    plot(sets, out / "accuracy_vs_length.png")
    print(text)
    print(f"written: {out / 'report.md'}, {out / 'accuracy_vs_length.png'}")


if __name__ == "__main__":
    main()
