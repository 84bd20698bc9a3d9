"""Tables and plots of experiments/grpo_step (`python -m posttrain.bench grpo_step` records) from results/*.csv.

    python experiments/grpo_step/report.py              # results/*.csv -> results/report.md and two plots
    python experiments/grpo_step/report.py --collect    # first the CSVs from the bench's output files
    python experiments/grpo_step/report.py --collect DIR --results OUT

`--collect [DIR]` reads the bench's JSON-lines output files DIR/*.jsonl (default results/, git-ignored; each
finished record: one path, seed and set of rounds, not the `.progress.jsonl` lines) and the `make train` run folders
DIR/make_train_*/ (summary.json, time_v.txt), and writes the tables the report reads:

    records.csv     one row per bench record: its file, path, --set overrides, seed, steps, seconds per step and
                    their split by the step timer's phases, CPU seconds, tokens/s, peak RSS, ratios to the anchor,
                    held-out accuracy before / after; per-round lists, knobs and load averages as JSON
    steps.csv       one row per (record, round, optimizer step): the step's mean reward
    heldout.csv     one row per held-out problem, one column per record with held-out results (named by its
                    `record` number): correct after training (1/0)
    make_train.csv  one row per `make train` run folder: held-out before / after, runtime, /usr/bin/time -v fields

The default mode rebuilds each file's records from these and prints `plot.py`'s tables (`table`, `heldout`, `seeds`)
for the file lists of SECTIONS into results/report.md, and draws PLOTS with `plot.py`'s `split` and `rewards`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

from posttrain.analysis.tables import cell as _cell
from posttrain.analysis.tables import read_csv as _read_csv
from posttrain.analysis.tables import write_csv as _write_csv

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("grpo_step_plot", HERE / "plot.py")
plot = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]  # plot.py beside this file, by its path
_spec.loader.exec_module(plot)  # type: ignore[union-attr]

COMMAND = "python experiments/grpo_step/report.py"
PHASES = ("generation", "scoring", "rewards", "loss_backward", "optimizer", "other")
SCALARS = (
    ("model", str),
    ("train", str),
    ("batch", int),
    ("num_generations", int),
    ("completion_length", int),
    ("steps", int),
    ("warmup", int),
    ("rounds", int),
    ("seed", int),
    ("heldout", int),
    ("step_s", float),
    ("cpu_s", float),
    ("gen_tokens_per_s", float),
    ("peak_rss_mib", float),
    ("ratio_vs_trl", float),
    ("ratio_vs_trl_median", float),
    ("cpu_ratio_vs_trl", float),
    ("heldout_acc_before", float),
    ("heldout_acc_after", float),
    ("heldout_gain", float),
    ("heldout_n", int),
)
JSON_FIELDS = ("set", "step_s_rounds", "cpu_s_rounds", "variants", "knobs", "loadavg")
RECORD_COLUMNS = (
    "record",
    "file",
    "path",
    "set",
    *(k for k, _ in SCALARS[:11]),  # model .. step_s
    *PHASES,
    *(k for k, _ in SCALARS[11:]),  # cpu_s .. heldout_n
    *JSON_FIELDS[1:],
)
TIME_FIELDS = {  # make_train.csv column: the /usr/bin/time -v label
    "wall": "Elapsed (wall clock) time (h:mm:ss or m:ss)",
    "user_s": "User time (seconds)",
    "sys_s": "System time (seconds)",
    "max_rss_kb": "Maximum resident set size (kbytes)",
}
MAKE_TRAIN = ("runtime_s", "heldout_eval_s", "heldout_acc_before", "heldout_acc_after", "heldout_n")

_DEFAULT_0_10 = [f"maketrain_default_seed{s}" for s in (0, 1, 10, 2, 3, 4, 5, 6, 7, 8, 9)]  # as `seed*` listed them
_DEFAULT_ALL = sorted(f"maketrain_default_seed{s}" for s in range(17))
_FP32MASTER = sorted(f"maketrain_fp32master_seed{s}" for s in range(11))
SECTIONS = (  # (title, plot.py command, the files it reads, in the order the README's commands listed them)
    (
        "The default path now (fp32 master weights under bf16 autocast), seeds 6 and 7",
        "table",
        ["maketrain_fp32master_seed6", "maketrain_fp32master_seed7"],
    ),
    ("The first bf16 default (bf16 weights), seeds 0-10: speed", "table", _DEFAULT_0_10),
    ("The first bf16 default (bf16 weights), seeds 0-10: held out", "heldout", _DEFAULT_0_10),
    (
        "Equal results: per seed, against the anchor of the same seed",
        "seeds",
        [*_DEFAULT_ALL, *(f"maketrain_hfgen_seed{s}" for s in range(5)), *_FP32MASTER],
    ),
    ("Knob by knob (seed 0, 10 timed steps after 1 warm-up, 1 thread)", "table", ["knobs_default", "knobs_fp32"]),
    ("The previous default's recipe on seed 3 (fp32, TRL's loss path)", "heldout", ["maketrain_fp32trl_seed3"]),
    ("Earlier: the fp32 default at equal threads, speed", "table", ["maketrain_t1_seed0", "maketrain_t1_seed1"]),
    ("Earlier: the fp32 default at equal threads, held out", "heldout", ["maketrain_t1_seed0", "maketrain_t1_seed1"]),
    ("Earlier: a loaded machine, 30 steps", "table", ["curves_seed0", "curves_seed1_posttrain"]),
)
PLOTS = (  # (file, plot.py command, the files it reads)
    ("split_fp32master.png", "split", ["maketrain_fp32master_seed6", "maketrain_fp32master_seed7"]),
    ("rewards_fp32master.png", "rewards", [*_FP32MASTER, *(f"maketrain_default_seed{s}" for s in range(11))]),
)
DPI = 80  # plot.py's default 110 made the two plots 126 kB


# --- collect: the bench's output files -> the CSV tables ------------------------------------------------------------


def collect(raw: Path, out: Path) -> list[Path]:
    records: list[list] = []
    steps: list[list] = []
    heldout: dict[int, list[str]] = {}
    for path in sorted(p for p in raw.glob("*.jsonl") if not p.name.endswith(".progress.jsonl")):
        for r in plot.read_records(path):
            i = len(records)
            row = {"record": i, "file": path.stem, "path": r["path"], **{k: r.get(k) for k, _ in SCALARS}}
            row |= {p: r["split_s"][p] for p in PHASES}
            row |= {k: json.dumps(r[k]) if k in r else None for k in JSON_FIELDS}
            records.append([_cell(row[c]) for c in RECORD_COLUMNS])
            for k, curve in enumerate(r.get("rewards", [])):
                steps += [[i, k, s + 1, _cell(float(v))] for s, v in enumerate(curve)]
            if r.get("heldout_correct"):
                heldout[i] = [_cell(float(v)) for v in r["heldout_correct"]]
    if not records:
        sys.exit(f"no bench records in {raw}/*.jsonl")
    make_train = []
    for folder in sorted(raw.glob("make_train_*/")):
        summary = json.loads((folder / "summary.json").read_text())
        time_v = folder / "time_v.txt"
        text = time_v.read_text() if time_v.is_file() else ""
        found = {k: re.search(rf"{re.escape(label)}: (.+)", text) for k, label in TIME_FIELDS.items()}
        make_train.append(
            [folder.name, *(_cell(summary.get(k)) for k in MAKE_TRAIN)]
            + [m.group(1).strip() if m else "" for m in found.values()]
        )
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "records.csv", RECORD_COLUMNS, records)
    _write_csv(out / "steps.csv", ("record", "round", "step", "reward"), steps)
    n = max((len(v) for v in heldout.values()), default=0)
    columns = [[*v, *[""] * (n - len(v))] for v in heldout.values()]
    _write_csv(out / "heldout.csv", ("problem", *map(str, heldout)), [[j, *c] for j, c in enumerate(zip(*columns))])
    _write_csv(out / "make_train.csv", ("run", *MAKE_TRAIN, *TIME_FIELDS), make_train)
    return [out / f"{name}.csv" for name in ("records", "steps", "heldout", "make_train")]


# --- report: the CSV tables -> report.md and the plots --------------------------------------------------------------


def read_tables(results: Path) -> dict[str, list[dict]]:
    """{file stem: its records, each as plot.read_records returns it from the file}."""
    by_record: dict[str, dict] = {}
    files: dict[str, list[dict]] = {}
    for row in _read_csv(results / "records.csv"):
        r: dict = {"bench": "grpo_step", "path": row["path"]}
        for key, kind in SCALARS:
            if row[key] != "":
                r[key] = kind(row[key])
        r["split_s"] = {p: float(row[p]) for p in PHASES}
        r |= {k: json.loads(row[k]) for k in JSON_FIELDS if row[k] != ""}
        by_record[row["record"]] = r
        files.setdefault(row["file"], []).append(r)
    for row in _read_csv(results / "steps.csv"):
        curves = by_record[row["record"]].setdefault("rewards", [])
        if int(row["round"]) == len(curves):
            curves.append([])
        curves[int(row["round"])].append(float(row["reward"]))
    for row in _read_csv(results / "heldout.csv"):
        for record, correct in row.items():
            if record != "problem" and correct != "":
                by_record[record].setdefault("heldout_correct", []).append(float(correct))
    return files


def bench_records(files: dict[str, list[dict]], names: list[str]) -> list[dict]:
    """plot.records() of the files `names`: fresh copies, since plot.prepare renames paths in place."""
    return plot.prepare([json.loads(json.dumps(r)) for name in names for r in files[name]])


def make_train_table(results: Path) -> str:
    lines = [
        "| run | held-out before -> after | runtime s | held-out eval s | wall | user+sys CPU s | peak RSS GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in _read_csv(results / "make_train.csv"):
        cpu = f"{float(r['user_s']) + float(r['sys_s']):.0f}" if r["user_s"] else "-"
        rss = f"{int(r['max_rss_kb']) / 2**20:.2f}" if r["max_rss_kb"] else "-"
        cells = [r["run"], f"{r['heldout_acc_before']} -> {r['heldout_acc_after']}", r["runtime_s"]]
        cells += [r["heldout_eval_s"], r["wall"] or "-", cpu, rss]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: Path, out: Path, plots: bool = True) -> Path:
    files = read_tables(results)
    kinds = {"table": plot.table, "heldout": plot.heldout_table, "seeds": plot.seed_comparison}
    text = [f"<!-- {COMMAND} -->", ""]
    for title, kind, names in SECTIONS:
        if all(name in files for name in names):
            command = f"python experiments/grpo_step/plot.py {kind} " + " ".join(f"{n}.jsonl" for n in names)
            text += [f"## {title}", "", f"`{command}`", "", kinds[kind](bench_records(files, names)), ""]
    if (results / "make_train.csv").is_file():
        text += ["## `make train` (`python train.py +experiment=grpo_smollm2_add`)", "", make_train_table(results), ""]
    out.mkdir(parents=True, exist_ok=True)
    for png, kind, names in PLOTS:
        if all(name in files for name in names):
            text += [f"![{kind}]({png})", ""]
            if plots:
                draw = plot.plot_split if kind == "split" else plot.plot_rewards
                draw(bench_records(files, names), out / png, dpi=DPI)
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="the CSV tables (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md and the plots go (default: --results)")
    ap.add_argument("--collect", nargs="?", const=HERE / "results", type=Path, help="bench outputs to collect first")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    path = report(args.results, args.out or args.results, plots=not args.no_plots)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
