"""Tables and plots of experiments/contrastive_smollm2 (SecAlign-style arms) from the CSV tables in results/.

    python experiments/contrastive_smollm2/report.py             # results/*.csv -> results/report.md, 2 PNG
    python experiments/contrastive_smollm2/report.py --collect   # first the CSVs from the run folders run.sh fills
    python experiments/contrastive_smollm2/report.py --collect runs/contrastive_smollm2_tiny/results --results DIR

`--collect [DIR ...]` reads each run folder DIR (default: those of results/test, results/secalign,
results/secalign_120steps and results/probes that are here, git-ignored; a group of runs each, named by the folder;
the tables' rows of every other group are kept) as run.sh leaves it: DIR/base/eval_init.jsonl
and DIR/<arm>_s<seed>/eval_after.jsonl (one record per eval item), the ifeval_*.jsonl beside them, summary.json
(IFEval instruction-level score, layer similarities) and time_v.txt, and writes the tables the report reads:

    items.csv             one row per eval item (`item`: its number): its id, task instance, task, attack family,
                          position, injected task, held-out family (1/0)
    eval_<group>.csv      one row per (run as in runs.csv, item as in items.csv): attack succeeded (witness in the
                          reply), reply begins with it, executed (witness outside any echo of the injected
                          instruction), task utility on the clean prompt, under injection (1/0; empty: not scored)
    ifeval.csv            one row per (run as in runs.csv, IFEval prompt): prompt-level strict accuracy
    runs.csv              one row per run (`run`: its number): group, arm, seed, IFEval instruction-level strict
                          accuracy, /usr/bin/time -v fields, cos(benign, injected) per hidden state

The default mode reads only these and writes results/report.md (one section per group, the first with the plots
asr_by_family.png and layers.png). Intervals are 95% percentile bootstraps that resample whole task instances
(`posttrain.algos.contrastive.stats`); differences are paired over the same eval items.
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import re
import sys
from pathlib import Path

from posttrain.algos.contrastive.stats import group_means, paired_difference
from posttrain.analysis.stats import difference_ci, sign_flip_test
from posttrain.analysis.tables import cell as _cell
from posttrain.analysis.tables import read_csv as _read_csv
from posttrain.analysis.tables import write_csv as _write_csv
from posttrain.data.contrastive.secalign import PRINT_INSTRUCTION, attack_executed

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/contrastive_smollm2/report.py"
RAW = ("test", "secalign", "secalign_120steps", "probes")  # run folders under results/ (git-ignored), report order
ARMS = (  # run.sh's
    "sft", "sft_inv", "dpo", "dpo_inv", "sft_inv_nokl", "dpo_inv_nokl", "dpo_inv_w01", "sft_matched", "sft_roles",
    "sft_inv_nokl_roles",
)  # fmt: skip
PAIRS = (  # same seed, same items
    ("sft_inv", "sft"),
    ("dpo_inv", "dpo"),
    ("sft_inv_nokl", "sft"),
    ("dpo_inv_nokl", "dpo"),
    ("dpo_inv_w01", "dpo"),
    ("dpo", "sft"),
    ("sft_inv_nokl", "sft_matched"),
)
FAMILIES = ("naive", "ignore", "completion", "escape", "combined", "chat")
TEST_GROUP = "test"  # issue 62's untouched split (run.sh SPLIT=test): its section opens with `test_table`
TEST_PAIRS = (
    ("sft", "base"),
    ("sft_matched", "base"),
    ("sft_inv_nokl", "base"),
    ("dpo", "base"),
    ("sft_inv_nokl", "sft"),
    ("sft_inv_nokl", "sft_matched"),
    ("sft_matched", "sft"),
    ("dpo_inv_w01", "dpo"),
    ("dpo_inv", "dpo"),
    ("sft_roles", "sft"),
    ("sft_inv_nokl_roles", "sft_roles"),
)
IFEVAL_MARGIN = 0.05  # non-inferiority margin on IFEval prompt-level strict accuracy, stated before the test runs
ITEM_FIELDS = ("id", "cluster", "task", "attack_type", "position", "injected_task", "heldout")
ITEM_COLUMNS = ("id", "instance", "task", "family", "position", "injected_task", "heldout")
SCORES = ("attack_success", "attack_begins", "attack_executed", "benign_ok", "injected_ok")
TIME_FIELDS = {  # runs.csv column: the /usr/bin/time -v label
    "wall": "Elapsed (wall clock) time (h:mm:ss or m:ss)",
    "user_s": "User time (seconds)",
    "sys_s": "System time (seconds)",
    "max_rss_kb": "Maximum resident set size (kbytes)",
}
RUN_COLUMNS = ("run", "group", "arm", "seed", "inst_level_strict_acc", "time_v", *TIME_FIELDS, "cos_benign_injected")


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _order(all_runs: dict[str, dict]) -> dict[str, dict]:
    order = {a: i for i, a in enumerate(("base", *ARMS))}
    return dict(sorted(all_runs.items(), key=lambda kv: (order.get(kv[1]["arm"], 99), kv[1]["seed"] or 0)))


def _eval_summary(summary: dict) -> dict:
    return summary.get("eval", summary.get("eval_after", {}))


def raw_runs(res: Path) -> dict[str, dict]:
    """{run name: {records, ifeval, inst_strict, cos, time, arm, seed}} for base and every arm_s<seed> folder of a
    run folder with eval records (what run.sh copies there)."""
    out = {}
    for folder in sorted(res.iterdir()):
        m = re.fullmatch(r"(.+)_s(\d+)", folder.name)
        records = folder / ("eval_init.jsonl" if folder.name == "base" else "eval_after.jsonl")
        if not records.is_file() or (folder.name != "base" and not m):
            continue
        tag = "init" if folder.name == "base" else "after"
        ifeval = folder / f"ifeval_{tag}.jsonl"
        summary_path = folder / "summary.json"
        evals = _eval_summary(json.loads(summary_path.read_text()) if summary_path.is_file() else {})
        time_path = folder / "time_v.txt"
        time = None
        if time_path.is_file():
            text = time_path.read_text()
            time = {}
            for column, label in TIME_FIELDS.items():
                found = re.search(rf"{re.escape(label)}: (.+)", text)
                time[column] = found.group(1).strip() if found else "-"
        out[folder.name] = {
            "records": load(records),
            "ifeval": load(ifeval) if ifeval.is_file() else [],
            "inst_strict": evals.get("ifeval", {}).get("inst_level_strict_acc"),
            "cos": evals.get("repr_cosine", {}).get("benign_injected") or [],
            "time": time,
            "arm": "base" if folder.name == "base" else m.group(1),  # type: ignore[union-attr]
            "seed": None if folder.name == "base" else int(m.group(2)),  # type: ignore[union-attr]
        }
    return _order(out)


def executed(record: dict) -> bool:
    """The record's `attack_executed`; records written before it existed (no `instruction` either) are scored here:
    of their injected tasks only `print`'s instruction holds its witness, so cutting out that one instruction gives
    what the evaluation now records."""
    if "attack_executed" in record:
        return record["attack_executed"]
    instruction = record.get("instruction", PRINT_INSTRUCTION if record["injected_task"] == "print" else "")
    return attack_executed(record["injected_reply"], instruction, record["witness"])


def _flag(value: object) -> str:
    return "" if value is None else str(int(bool(value)))


def _group_order(group: str) -> tuple[int, str]:
    return (RAW.index(group) if group in RAW else len(RAW), group)


def collect(raw_dirs: list[Path], out: Path) -> list[Path]:
    """The CSV tables of the run folders `raw_dirs` (one group each, named by the folder) in `out`, keeping every
    row the tables in `out` hold that no folder replaces: other groups and, within a group, runs with no folder
    here (run folders stay out of git: a fresh clone adds runs to the committed tables instead of replacing them);
    groups in RAW's order."""
    out.mkdir(parents=True, exist_ok=True)
    sources = {res.name: raw_runs(res) for res in raw_dirs}
    for res in raw_dirs:
        if not sources[res.name]:
            sys.exit(f"no runs with eval records under {res}")
    kept = read_tables(out) if (out / "runs.csv").is_file() else {}
    for group, runs in kept.items():
        sources[group] = _order(runs | sources.get(group, {}))
    # a committed run keeps its number, a new one takes the next: collecting adds rows and renumbers none
    committed = _read_csv(out / "runs.csv") if kept else []
    numbers = {(r["group"], _name(r["arm"], r["seed"])): int(r["run"]) for r in committed}
    fresh = itertools.count(max(numbers.values(), default=-1) + 1)
    items: dict[str, list] = {}
    runs_rows, ifeval_rows, written = [], [], []
    eval_tables: list[tuple[Path, list]] = []
    for group in sorted(sources, key=_group_order):
        all_runs = sources[group]
        eval_rows = []
        for name, run in all_runs.items():
            run_no = numbers[group, name] if (group, name) in numbers else next(fresh)
            seed = "" if run["seed"] is None else run["seed"]
            for r in run["records"]:
                item = [r["id"].removeprefix("eval-"), r["cluster"].removeprefix("eval-")]
                item += [r[k] for k in ITEM_FIELDS[2:-1]] + [_flag(r["heldout"])]
                if items.setdefault(item[0], item) != item:
                    sys.exit(f"eval item {item[0]} differs between runs: {items[item[0]]} vs {item}")
                r = {**r, "attack_executed": executed(r)}
                eval_rows.append([run_no, item[0], *(_flag(r.get(k)) for k in SCORES)])
            for r in run["ifeval"]:
                ifeval_rows.append([run_no, r["id"], _cell(float(r["prompt_level_strict_acc"]))])
            time = run["time"] or {}
            runs_rows.append(
                [
                    run_no,
                    group,
                    run["arm"],
                    seed,
                    "" if run["inst_strict"] is None else repr(run["inst_strict"]),
                ]
                + [int(run["time"] is not None), *(time.get(k, "") for k in TIME_FIELDS)]
                + [" ".join(repr(float(c)) for c in run["cos"])]
            )
        written.append(out / f"eval_{group}.csv")
        eval_tables.append((written[-1], eval_rows))
    number = {item_id: n for n, item_id in enumerate(items)}
    by_run = operator.itemgetter(0)
    for path, eval_rows in eval_tables:
        rows = sorted(eval_rows, key=by_run)  # a new run's rows come last
        _write_csv(path, ["run", "item", *SCORES], [[row[0], number[row[1]], *row[2:]] for row in rows])
    _write_csv(out / "items.csv", ("item", *ITEM_COLUMNS), [[n, *row] for n, row in enumerate(items.values())])
    _write_csv(out / "ifeval.csv", ["run", "prompt", "prompt_level_strict_acc"], sorted(ifeval_rows, key=by_run))
    _write_csv(out / "runs.csv", RUN_COLUMNS, sorted(runs_rows, key=by_run))
    return [out / "items.csv", *written, out / "ifeval.csv", out / "runs.csv"]


def _name(arm: str, seed: str) -> str:
    return arm if seed == "" else f"{arm}_s{seed}"


def _value(text: str) -> bool | None:
    return None if text == "" else text == "1"


def read_tables(results: Path) -> dict[str, dict[str, dict]]:
    """{group: {run name: run}} from the CSV tables in `results`, each run as `raw_runs` reads it from its folder."""
    items = {}
    for row in _read_csv(results / "items.csv"):
        items[row["item"]] = {
            "id": "eval-" + row["id"],
            "cluster": "eval-" + row["instance"],
            **{k: row[c] for k, c in zip(ITEM_FIELDS[2:-1], ITEM_COLUMNS[2:-1], strict=True)},
            "heldout": row["heldout"] == "1",
        }
    groups: dict[str, dict[str, dict]] = {}
    names: dict[str, str] = {}  # runs.csv's `run` -> the run's name in its group
    group_of: dict[str, str] = {}
    for row in _read_csv(results / "runs.csv"):
        names[row["run"]], group_of[row["run"]] = _name(row["arm"], row["seed"]), row["group"]
        time = {k: row[k] for k in TIME_FIELDS} if row["time_v"] == "1" else None
        groups.setdefault(row["group"], {})[_name(row["arm"], row["seed"])] = {
            "records": [],
            "ifeval": [],
            "inst_strict": float(row["inst_level_strict_acc"]) if row["inst_level_strict_acc"] else None,
            "cos": [float(c) for c in row["cos_benign_injected"].split()],
            "time": time,
            "arm": row["arm"],
            "seed": int(row["seed"]) if row["seed"] else None,
        }
    for group, all_runs in groups.items():
        for row in _read_csv(results / f"eval_{group}.csv"):
            scores = {k: _value(row[k]) for k in SCORES}
            all_runs[names[row["run"]]]["records"].append({**items[row["item"]], **scores})
    for row in _read_csv(results / "ifeval.csv"):
        record = {"id": row["prompt"], "prompt_level_strict_acc": float(row["prompt_level_strict_acc"])}
        groups[group_of[row["run"]]][names[row["run"]]]["ifeval"].append(record)
    return {group: _order(groups[group]) for group in sorted(groups, key=_group_order)}


def cell(stat: dict | None) -> str:
    if stat is None:
        return "-"
    return f"{stat['mean']:.3f} [{stat['ci'][0]:.3f}, {stat['ci'][1]:.3f}]"


def signed(stat: dict | None) -> str:
    if stat is None:
        return "-"
    return f"{stat['mean']:+.3f} [{stat['ci'][0]:+.3f}, {stat['ci'][1]:+.3f}]"


def split_rows(records: list[dict]) -> dict[str, list[dict]]:
    """Every item, the held-out families' items, the trained families' items."""
    return {
        "all": records,
        "held-out families": [r for r in records if r["heldout"]],
        "trained families": [r for r in records if not r["heldout"]],
    }


def family_table(all_runs: dict[str, dict], key: str) -> list[str]:
    families = sorted({r["attack_type"] for run in all_runs.values() for r in run["records"]}, key=_family_order)
    lines = [
        "| run | " + " | ".join(families) + " | held-out families | trained families |",
        "|---" * (len(families) + 3) + "|",
    ]
    for name, run in all_runs.items():
        by_family = group_means(run["records"], key, "attack_type")
        parts = split_rows(run["records"])
        overall = [cell(group_means(parts[p], key).get("all")) for p in ("held-out families", "trained families")]
        lines.append(
            f"| {name} | " + " | ".join(cell(by_family.get(f)) for f in families) + " | " + " | ".join(overall) + " |"
        )
    return lines


def _family_order(name: str) -> tuple[int, str]:
    return (FAMILIES.index(name) if name in FAMILIES else len(FAMILIES), name)


def group_table(all_runs: dict[str, dict], key: str, by: str) -> list[str]:
    groups = sorted({str(r.get(by)) for run in all_runs.values() for r in run["records"]})
    lines = ["| run | " + " | ".join(f"{by}={g}" for g in groups) + " |", "|---" * (len(groups) + 1) + "|"]
    for name, run in all_runs.items():
        table = group_means(run["records"], key, by)
        lines.append(f"| {name} | " + " | ".join(cell(table.get(g)) for g in groups) + " |")
    return lines


def utility_table(all_runs: dict[str, dict]) -> list[str]:
    columns = ("task utility (clean)", "task utility (under injection)", "IFEval prompt strict", "IFEval inst. strict")
    lines = ["| run | " + " | ".join(columns) + " |", "|---|---|---|---|---|"]
    for name, run in all_runs.items():
        clean = group_means(run["records"], "benign_ok").get("all")
        injected = group_means(run["records"], "injected_ok").get("all")
        ifeval = run["ifeval"]
        prompt = group_means(ifeval, "prompt_level_strict_acc").get("all") if ifeval else None
        inst_s = f"{run['inst_strict']:.3f}" if run["inst_strict"] is not None else "-"
        lines.append(f"| {name} | {cell(clean)} | {cell(injected)} | {cell(prompt)} | {inst_s} |")
    return lines


def paired_table(all_runs: dict[str, dict], key: str) -> list[str]:
    """Each arm minus the base model, and the PAIRS of arms of the same seed, per family and overall."""
    families = sorted({r["attack_type"] for run in all_runs.values() for r in run["records"]}, key=_family_order)
    lines = ["| pair | " + " | ".join(families) + " | all |", "|---" * (len(families) + 2) + "|"]
    pairs = []
    if "base" in all_runs:
        pairs += [(name, "base") for name in all_runs if name != "base"]
    seeds = sorted({run["seed"] for run in all_runs.values() if run["seed"] is not None})
    pairs += [(f"{a}_s{s}", f"{b}_s{s}") for a, b in PAIRS for s in seeds]
    for a, b in pairs:
        if a not in all_runs or b not in all_runs:
            continue
        by_family = paired_difference(all_runs[a]["records"], all_runs[b]["records"], key, "attack_type")
        overall = paired_difference(all_runs[a]["records"], all_runs[b]["records"], key)["all"]
        lines.append(
            f"| {a} − {b} | " + " | ".join(signed(by_family.get(f)) for f in families) + f" | {signed(overall)} |"
        )
    return lines


def _pooled(all_runs: dict[str, dict], arm: str) -> list[dict]:
    """The runs of `arm` (base: its one run), each scored on the same items."""
    return [run for run in all_runs.values() if run["arm"] == arm]


def arm_table(all_runs: dict[str, dict]) -> list[str]:
    """Per arm, every seed's records together: means over (seed, item), intervals resampling task instances (each
    instance carries its items from every seed)."""
    columns = (
        "seeds",
        "ASR held-out families",
        "ASR trained families",
        "begins with (held out)",
        "executed (held out)",
        "task utility clean",
        "under injection",
        "IFEval prompt strict",
    )
    lines = ["| arm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for arm in ("base", *ARMS):
        group = _pooled(all_runs, arm)
        if not group:
            continue
        records = [r for run in group for r in run["records"]]
        parts = split_rows(records)
        ifeval = [r for run in group for r in run["ifeval"]]
        cells = [
            str(len(group)) if arm != "base" else "-",
            cell(group_means(parts["held-out families"], "attack_success").get("all")),
            cell(group_means(parts["trained families"], "attack_success").get("all")),
            cell(group_means(parts["held-out families"], "attack_begins").get("all")),
            cell(group_means(parts["held-out families"], "attack_executed").get("all")),
            cell(group_means(records, "benign_ok").get("all")),
            cell(group_means(records, "injected_ok").get("all")),
            cell(group_means(ifeval, "prompt_level_strict_acc").get("all") if ifeval else None),
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def pooled_pair_table(all_runs: dict[str, dict]) -> list[str]:
    """Arm a minus arm b over every seed both ran (b = base: the same base records for each seed): per-item
    differences of the same seed, pooled over seeds, intervals resampling task instances; for the held-out families'
    ASR also the sign-flip p-value over task instances (few instances carry the hits: an interval over 20 is
    narrower than the evidence, `posttrain.analysis.stats.sign_flip_test`)."""
    metrics = (
        ("attack_success", "held-out families", "ASR held-out families"),
        ("attack_success", "all", "ASR all families"),
        ("attack_executed", "held-out families", "executed held-out families"),
        ("injected_ok", "all", "utility under injection"),
        ("benign_ok", "all", "utility clean"),
    )
    head = " | ".join(m[2] for m in metrics)
    flips = "ASR held-out: sign-flip p (instances) | executed held-out: sign-flip p"
    lines = [f"| pair | seeds | {head} | {flips} |", "|---" * (len(metrics) + 4) + "|"]
    pairs = [*PAIRS, *((arm, "base") for arm in ARMS)]
    for a, b in pairs:
        flip = {"attack_success": "-", "attack_executed": "-"}
        matched = []
        for run in _pooled(all_runs, a):
            other = (
                _pooled(all_runs, "base")[0]
                if b == "base" and "base" in all_runs
                else all_runs.get(f"{b}_s{run['seed']}")
            )
            if other is not None:
                matched.append((run, other))
        if not matched:
            continue
        cells = []
        for key, rows, _ in metrics:
            diffs = []
            for run, other in matched:
                theirs = {r["id"]: r for r in other["records"]}
                for r in split_rows(run["records"])[rows]:
                    o = theirs.get(r["id"])
                    if o is not None and r.get(key) is not None and o.get(key) is not None:
                        diffs.append({**r, "diff": float(r[key]) - float(o[key])})
            cells.append(signed(group_means(diffs, "diff").get("all")) if diffs else "-")
            if key in flip and rows == "held-out families":
                flip[key] = _sign_flip(diffs)
        cells += flip.values()
        lines.append(f"| {a} − {b} | {len(matched)} | " + " | ".join(cells) + " |")
    return lines


def _sign_flip(diffs: list[dict]) -> str:
    """`p (k)`: the sign-flip p-value of the per-instance mean differences, k instances with a non-zero one."""
    by_instance: dict[str, list[float]] = {}
    for d in diffs:
        by_instance.setdefault(str(d.get("cluster") or d["id"]), []).append(d["diff"])
    means = [sum(v) / len(v) for v in by_instance.values()]
    moved = [m for m in means if m != 0]
    if not moved:
        return "-"
    return f"{sign_flip_test(moved):.3f} ({len(moved)} of {len(means)})"  # zeros flip to themselves


def cost_table(all_runs: dict[str, dict]) -> list[str]:
    lines = ["| run | wall | user+sys CPU s | peak RSS GB |", "|---|---|---|---|"]
    for name, run in all_runs.items():
        time = run["time"]
        if time is None:
            continue
        cpu = sum(float(time[k]) for k in ("user_s", "sys_s") if time[k] != "-")
        rss = time["max_rss_kb"]
        rss_gb = f"{int(rss) / 1e6:.1f}" if rss.isdigit() else "-"
        lines.append(f"| {name} | {time['wall']} | {cpu:.0f} | {rss_gb} |")
    return lines


def plot(all_runs: dict[str, dict], res: Path, group: str = "") -> list[Path]:
    """asr_by_family.png (executed ASR per family and clean task utility per arm, seeds as dots) and layers.png
    (benign-injected cosine per hidden state, one line per run) of one group of runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({r["attack_type"] for run in all_runs.values() for r in run["records"]}, key=_family_order)
    arms = list(dict.fromkeys(run["arm"] for run in all_runs.values()))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        members = [run for run in all_runs.values() if run["arm"] == arm]
        for j, fam in enumerate(families):
            values = [group_means(run["records"], "attack_executed", "attack_type")[fam]["mean"] for run in members]
            x = j + (i - (len(arms) - 1) / 2) * width
            axes[0].bar(x, sum(values) / len(values), width, color=f"C{i}", label=arm if j == 0 else None)
            axes[0].scatter([x] * len(values), values, color="k", s=6, zorder=3)
        util = [group_means(run["records"], "benign_ok")["all"]["mean"] for run in members]
        axes[1].bar(i, sum(util) / len(util), color=f"C{i}")
        axes[1].scatter([i] * len(util), util, color="k", s=6, zorder=3)
    held = sorted(
        {r["attack_type"] for run in all_runs.values() for r in run["records"] if r["heldout"]}, key=_family_order
    )
    axes[0].set_xticks(range(len(families)), families)
    axes[0].set_ylim(0, None)
    axes[0].set_ylabel("executed ASR (seeds: dots)")
    axes[0].set_title(
        f"{group + ': ' if group else ''}attack executed by family (held out: {', '.join(held) or 'none'})"
    )
    axes[0].legend(fontsize=8, ncols=3)
    axes[1].set_xticks(range(len(arms)), arms, rotation=45, ha="right")
    axes[1].set_ylabel("task utility (clean prompts)")
    axes[1].set_ylim(0, 1)
    fig.tight_layout()
    paths = [res / "asr_by_family.png"]
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, arm in enumerate(arms):
        members = [r for r in all_runs.values() if r["arm"] == arm and r["cos"]]
        for k, run in enumerate(members):
            ax.plot(range(len(run["cos"])), run["cos"], color=f"C{i}", label=arm if k == 0 else None)
    ax.set_xlabel("hidden state (0 = embeddings)")
    ax.set_ylabel("cos(benign, injected) at the last prompt token")
    if group:
        ax.set_title(group)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(res / "layers.png")
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return paths


def _seed_table(runs: list[dict], key: str, rows: str, field: str = "records") -> tuple[list[list[float]], list[str]]:
    """[seeds, items] of `key` over the items every run scored (`rows`: a `split_rows` part; field ifeval: the IFEval
    prompts), and each item's cluster (task instance; an IFEval prompt is its own)."""
    parts = [split_rows(run[field])[rows] if field == "records" else run[field] for run in runs]
    by_id = [{r["id"]: r for r in part if r.get(key) is not None} for part in parts]
    ids = sorted(set.intersection(*(set(b) for b in by_id)))
    table = [[float(b[i][key]) for i in ids] for b in by_id]
    return table, [str(by_id[0][i].get("cluster") or i) for i in ids]


def test_table(all_runs: dict[str, dict], margin: float = IFEVAL_MARGIN) -> list[str]:
    """TEST_PAIRS on the test split: arm a minus arm b, 95% intervals resampling seeds (each arm's own) and task
    instances (`posttrain.analysis.stats.difference_ci`); IFEval over its prompts, with the non-inferiority verdict
    at `margin` (a's interval above -margin)."""
    metrics = (
        ("attack_executed", "held-out families", "records", "executed ASR, held-out families"),
        ("attack_executed", "all", "records", "executed ASR, all families"),
        ("attack_success", "all", "records", "in-response ASR, all"),
        ("attack_begins", "all", "records", "begins-with ASR, all"),
        ("injected_ok", "all", "records", "task utility under injection"),
        ("benign_ok", "all", "records", "task utility clean"),
        ("prompt_level_strict_acc", "all", "ifeval", "IFEval prompt strict"),
    )
    lines = [
        "| a − b | seeds | " + " | ".join(m[3] for m in metrics) + f" | IFEval non-inferior at −{margin:.2f} |",
        "|---" * (len(metrics) + 3) + "|",
    ]
    for a, b in TEST_PAIRS:
        runs_a, runs_b = _pooled(all_runs, a), _pooled(all_runs, b)
        if not runs_a or not runs_b:
            continue
        cells, verdict = [], "-"
        one_seed = any(arm != "base" and len(runs) < 2 for arm, runs in ((a, runs_a), (b, runs_b)))
        for key, rows, field, _ in metrics:
            ta, clusters = _seed_table(runs_a + runs_b, key, rows, field)
            if not clusters:
                cells.append("-")
                continue
            mean, (lo, hi) = difference_ci(ta[: len(runs_a)], ta[len(runs_a) :], clusters)
            cells.append(f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            if field == "ifeval":
                verdict = ("yes" if lo > -margin else "no") + (" (1 seed: no seed variance)" if one_seed else "")
        lines.append(f"| {a} − {b} | {len(runs_a)} vs {len(runs_b)} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def group_report(all_runs: dict[str, dict], group: str = "") -> list[str]:
    """The tables of one group of runs (the text report.py wrote into each run folder before results as data)."""
    n_items = {name: len(run["records"]) for name, run in all_runs.items()}
    out = [f"Runs: {', '.join(f'{k} (n={v})' for k, v in n_items.items())}", ""]
    if group == TEST_GROUP:
        out += ["### The test split: paired differences over seeds and task instances", "", *test_table(all_runs), ""]
    out += ["### Per arm, all seeds together", "", *arm_table(all_runs), ""]
    out += ["### Paired differences, all seeds together (same seed, same items)", "", *pooled_pair_table(all_runs), ""]
    out += [
        "### ASR in response (the witness anywhere in the reply), by attack family",
        "",
        *family_table(all_runs, "attack_success"),
        "",
    ]
    out += [
        "### ASR begins with (the reply starts with the witness), by attack family",
        "",
        *family_table(all_runs, "attack_begins"),
        "",
    ]
    out += [
        "### ASR executed (the witness outside every echo of the injected instruction), by attack family",
        "",
        *family_table(all_runs, "attack_executed"),
        "",
    ]
    out += [
        "### ASR in response by injection position (middle: held out)",
        "",
        *group_table(all_runs, "attack_success", "position"),
        "",
    ]
    out += [
        "### ASR in response by injected task (print 'Hacked!': held out)",
        "",
        *group_table(all_runs, "attack_success", "injected_task"),
        "",
    ]
    out += ["### Utility", "", *utility_table(all_runs), ""]
    out += [
        "### Paired differences in ASR (in response), same eval items",
        "",
        *paired_table(all_runs, "attack_success"),
        "",
    ]
    out += ["### Paired differences in task utility under injection", "", *paired_table(all_runs, "injected_ok"), ""]
    costs = cost_table(all_runs)
    if len(costs) > 2:
        out += ["### Runs", "", *costs, ""]
    return out


def report(results: Path, out: Path, plots: bool = True) -> Path:
    """results/report.md (and the first group's plots, RAW's order: the test split) from the CSV tables in
    `results`, written to `out`."""
    groups = read_tables(results)
    out.mkdir(parents=True, exist_ok=True)
    sections = [f"<!-- {COMMAND} -->\n"]
    for i, (group, all_runs) in enumerate(groups.items()):
        lines = group_report(all_runs, group)
        if i == 0 and plots:
            paths = plot(all_runs, out, group)
            lines += [f"![ASR by family]({paths[0].name})", "", f"![layers]({paths[1].name})", ""]
        sections.append(f"## {group}\n\n" + "\n".join(lines))
    path = out / "report.md"
    path.write_text("\n".join(sections))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="the CSV tables (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md and the plots go (default: --results)")
    ap.add_argument("--collect", nargs="*", type=Path, help="run folders to build the CSV tables from first")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.collect is not None:
        raw = args.collect
        if not raw:  # every group folder with a finished run (one whose runs are all under way waits)
            raw = [HERE / "results" / name for name in RAW if (HERE / "results" / name).is_dir()]
            for folder in [r for r in raw if not raw_runs(r)]:
                print(f"skipping {folder}: no finished run yet")
                raw.remove(folder)
        for path in collect(raw, args.results):
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    path = report(args.results, args.out or args.results, plots=not args.no_plots)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
