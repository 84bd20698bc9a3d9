"""The bad-input tables of experiments/reliability from results/cases.csv.

    python experiments/reliability/report.py                        # results/cases.csv -> results/report.md
    python experiments/reliability/report.py --collect RESULTS_JSON  # first the CSV from an older results.json

`cases.py` (real `python train.py` subprocesses) merges what it ran into results/cases.csv and calls `report()`.
`--collect FILE` builds the CSV from a results.json that cases.py wrote before (a list of records, the same fields;
this folder's, git-ignored, has case 13's overrides as they were before commit 48c769f: see LOG.md):

    cases.csv   one row per case, in cases.py's order: id, problem, overrides as displayed, exit code, every
                stderr line, files changed and files created under the work dir, the contract's problems (JSON
                lists), seconds, how it ran (subprocess), whether the case must create no file (writes_nothing)
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/reliability/report.py"
COLUMNS = ("id", "problem", "args", "exit", "stderr", "changed", "created", "problems", "seconds", "mode")
COLUMNS += ("writes_nothing",)
LISTS = ("stderr", "changed", "created", "problems")


def write_cases(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        for rec in records:
            row = []
            for key in COLUMNS:
                value = rec.get(key)
                if key in LISTS:
                    row.append(json.dumps(value or [], ensure_ascii=False))
                elif isinstance(value, bool):
                    row.append(int(value))
                else:
                    row.append("" if value is None else value)
            writer.writerow(row)


def read_cases(path: Path) -> list[dict]:
    """The records of cases.csv as cases.py's `record()` makes them."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.update({key: json.loads(row[key]) for key in LISTS})
        row["exit"] = int(row["exit"]) if row["exit"].lstrip("-").isdigit() else row["exit"]
        row["seconds"] = float(row["seconds"]) if row["seconds"] else None
        row["writes_nothing"] = {"1": True, "0": False}.get(row["writes_nothing"])
    return rows


def _case_list() -> list:
    spec = importlib.util.spec_from_file_location("reliability_cases", HERE / "cases.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.CASES


def collect(path: Path, out: Path) -> list[Path]:
    records = json.loads(path.read_text())
    if not isinstance(records, list) or not records:
        sys.exit(f"no case records in {path}")
    writes_nothing = {c.id: c.writes_nothing for c in _case_list()}
    records = [rec | {"writes_nothing": rec.get("writes_nothing", writes_nothing.get(rec["id"]))} for rec in records]
    write_cases(out / "cases.csv", records)
    return [out / "cases.csv"]


def _ok(rec: dict) -> str:
    return "yes" if not rec["problems"] else "NO: " + "; ".join(rec["problems"]).replace("|", "\\|")


def summary_table(records: list[dict]) -> list[str]:
    """One row per case: does it hold the contract."""
    lines = ["| # | case | exit | ok |", "|---|---|---|---|"]
    lines += [f"| {i} | {rec['problem']} | {rec['exit']} | {_ok(rec)} |" for i, rec in enumerate(records, 1)]
    return lines


# issue 60's counts over its 93 bad inputs at c264df7 (the inputs themselves were not given one by one)
BEFORE = {
    "one `error:` line before anything loads": 35,
    "one line only after torch import, the model build or step 1": 24,
    "traceback": 12,
    "silently accepted": 10,
}


def before_after_table(records: list[dict]) -> list[str]:
    """Issue 60's before (its counts) against the inputs it names that are cases here (`Case.before`), and how many
    of those hold the contract now."""
    named = {c.id: c.before for c in _case_list() if c.before}
    unknown = set(named.values()) - set(BEFORE)
    if unknown:
        raise ValueError(f"Case.before {sorted(unknown)} is none of {list(BEFORE)}")
    lines = [
        "| at c264df7 (issue 60) | of its 93 inputs | named in the issue: cases here | those now one `error:` line |",
        "|---|---|---|---|",
    ]
    for outcome, count in BEFORE.items():
        cases = [i for i, rec in enumerate(records, 1) if named.get(rec["id"]) == outcome]
        held = sum(not records[i - 1]["problems"] for i in cases)
        listed = ", ".join(map(str, cases)) if cases else "-"
        lines.append(f"| {outcome} | {count} | {len(cases)} ({listed}) | {held} of {len(cases)} |")
    return lines


def table(records: list[dict]) -> list[str]:
    """One row per case: its overrides and all of its stderr."""
    lines = [
        "| # | case | overrides (after the tiny-run base) | exit | observed stderr (all of it) | ok |",
        "|---|---|---|---|---|---|",
    ]
    for i, rec in enumerate(records, 1):
        msg = " ⏎ ".join(rec["stderr"]).replace("|", "\\|")
        args = rec["args"].replace("|", "\\|")
        lines.append(f"| {i} | {rec['problem']} | `{args}` | {rec['exit']} | `{msg}` | {_ok(rec)} |")
    return lines


def report(results: Path, out: Path) -> Path:
    records = read_cases(results / "cases.csv")
    held = sum(not rec["problems"] for rec in records)
    quiet = [rec for rec in records if rec["writes_nothing"]]
    seconds = sum(rec["seconds"] or 0 for rec in records)
    text = [
        f"<!-- {COMMAND} -->",
        "",
        f"{held}/{len(records)} cases hold the contract (a non-zero exit, stderr exactly one `error:` line matching "
        f"the case, no file on disk changed); {sum(not rec['created'] for rec in quiet)} of the {len(quiet)} "
        f"`writes_nothing` cases created no file; {seconds:.0f} s of subprocesses in all.",
        "",
        *summary_table(records),
        "",
        "## Issue 60: before and after",
        "",
        *before_after_table(records),
        "",
        "## Every case: its overrides and all of its stderr",
        "",
        *table(records),
        "",
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="cases.csv (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md goes (default: --results)")
    ap.add_argument("--collect", type=Path, metavar="RESULTS_JSON", help="a results.json to turn into cases.csv")
    args = ap.parse_args(argv)
    if args.collect is not None:
        for path in collect(args.collect, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    path = report(args.results, args.out or args.results)
    print(path.read_text())


if __name__ == "__main__":
    main()
