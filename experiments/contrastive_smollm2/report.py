"""Tables and plots of experiments/contrastive_smollm2 (SecAlign-style arms) from the files its runs leave.

    python experiments/contrastive_smollm2/report.py                      # results/secalign -> report.md + png
    python experiments/contrastive_smollm2/report.py --results <dir>      # e.g. runs/contrastive_smollm2_tiny/results

Reads <dir>/base/eval_init.jsonl and <dir>/<arm>_s<seed>/eval_after.jsonl (one record per eval item, written by
`run.sh`), the ifeval_*.jsonl beside them, summary.json (layer similarities) and time_v.txt. Intervals are 95%
percentile bootstraps that resample whole task instances (`posttrain.algos.contrastive.stats`); differences are
paired over the same eval items. Writes <dir>/report.md, <dir>/asr_by_family.png and <dir>/layers.png.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from posttrain.algos.contrastive.stats import group_means, paired_difference

HERE = Path(__file__).resolve().parent
ARMS = ("sft", "sft_inv", "dpo", "dpo_inv", "sft_inv_nokl", "dpo_inv_nokl", "dpo_inv_w01", "detection")  # run.sh's
PAIRS = (  # same seed, same items
    ("sft_inv", "sft"),
    ("dpo_inv", "dpo"),
    ("sft_inv_nokl", "sft"),
    ("dpo_inv_nokl", "dpo"),
    ("dpo_inv_w01", "dpo"),
    ("dpo", "sft"),
    ("detection", "sft"),
)
FAMILIES = ("naive", "ignore", "completion", "escape", "combined")


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def runs(res: Path) -> dict[str, dict]:
    """{run name: {records, ifeval, summary, arm, seed}} for base and every arm_s<seed> folder with records."""
    out = {}
    for folder in sorted(res.iterdir()):
        m = re.fullmatch(r"(.+)_s(\d+)", folder.name)
        records = folder / ("eval_init.jsonl" if folder.name == "base" else "eval_after.jsonl")
        if not records.is_file() or (folder.name != "base" and not m):
            continue
        tag = "init" if folder.name == "base" else "after"
        ifeval = folder / f"ifeval_{tag}.jsonl"
        summary = folder / "summary.json"
        out[folder.name] = {
            "records": load(records),
            "ifeval": load(ifeval) if ifeval.is_file() else [],
            "summary": json.loads(summary.read_text()) if summary.is_file() else {},
            "arm": "base" if folder.name == "base" else m.group(1),  # type: ignore[union-attr]
            "seed": None if folder.name == "base" else int(m.group(2)),  # type: ignore[union-attr]
        }
    order = {a: i for i, a in enumerate(("base", *ARMS))}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[1]["arm"], 99), kv[1]["seed"] or 0)))


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
        inst = run["summary"].get("eval", run["summary"].get("eval_after", {})).get("ifeval", {})
        inst_s = f"{inst['inst_level_strict_acc']:.3f}" if "inst_level_strict_acc" in inst else "-"
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
            cell(group_means(records, "benign_ok").get("all")),
            cell(group_means(records, "injected_ok").get("all")),
            cell(group_means(ifeval, "prompt_level_strict_acc").get("all") if ifeval else None),
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def pooled_pair_table(all_runs: dict[str, dict]) -> list[str]:
    """Arm a minus arm b over every seed both ran (b = base: the same base records for each seed): per-item
    differences of the same seed, pooled over seeds, intervals resampling task instances."""
    metrics = (
        ("attack_success", "held-out families", "ASR held-out families"),
        ("attack_success", "all", "ASR all families"),
        ("injected_ok", "all", "utility under injection"),
        ("benign_ok", "all", "utility clean"),
    )
    lines = ["| pair | seeds | " + " | ".join(m[2] for m in metrics) + " |", "|---" * (len(metrics) + 2) + "|"]
    pairs = [*PAIRS, *((arm, "base") for arm in ARMS)]
    for a, b in pairs:
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
        lines.append(f"| {a} − {b} | {len(matched)} | " + " | ".join(cells) + " |")
    return lines


def cost_table(res: Path, names: list[str]) -> list[str]:
    lines = ["| run | wall | user+sys CPU s | peak RSS GB |", "|---|---|---|---|"]
    for name in names:
        path = res / name / "time_v.txt"
        if not path.is_file():
            continue
        text = path.read_text()

        def field(label: str, text: str = text) -> str:
            m = re.search(rf"{re.escape(label)}: (.+)", text)
            return m.group(1).strip() if m else "-"

        cpu = sum(float(field(k)) for k in ("User time (seconds)", "System time (seconds)") if field(k) != "-")
        rss = field("Maximum resident set size (kbytes)")
        rss_gb = f"{int(rss) / 1e6:.1f}" if rss.isdigit() else "-"
        lines.append(f"| {name} | {field('Elapsed (wall clock) time (h:mm:ss or m:ss)')} | {cpu:.0f} | {rss_gb} |")
    return lines


def plot(all_runs: dict[str, dict], res: Path) -> list[Path]:
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
            values = [group_means(run["records"], "attack_success", "attack_type")[fam]["mean"] for run in members]
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
    axes[0].set_ylim(0, 1)
    axes[0].set_ylabel("ASR, in response (seeds: dots)")
    axes[0].set_title(f"attack success by family (held out: {', '.join(held) or 'none'})")
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
        for run in (r for r in all_runs.values() if r["arm"] == arm):
            evals = run["summary"].get("eval", run["summary"].get("eval_after", {}))
            cos = evals.get("repr_cosine", {}).get("benign_injected")
            if cos:
                ax.plot(range(len(cos)), cos, color=f"C{i}", label=arm if run["seed"] in (None, 0) else None)
    ax.set_xlabel("hidden state (0 = embeddings)")
    ax.set_ylabel("cos(benign, injected) at the last prompt token")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(res / "layers.png")
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results" / "secalign")
    args = ap.parse_args(argv)
    res: Path = args.results
    all_runs = runs(res)
    if not all_runs:
        sys.exit(f"no runs with eval records under {res}")
    n_items = {name: len(run["records"]) for name, run in all_runs.items()}
    out = [f"Runs: {', '.join(f'{k} (n={v})' for k, v in n_items.items())}", ""]
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
    costs = cost_table(res, list(all_runs))
    if len(costs) > 2:
        out += ["### Runs", "", *costs, ""]
    paths = plot(all_runs, res)
    out += [f"![ASR by family]({paths[0].name})", "", f"![layers]({paths[1].name})", ""]
    text = "\n".join(out)
    (res / "report.md").write_text(text)
    print(text)
    print(f"wrote {res / 'report.md'}, {', '.join(str(p) for p in paths)}")


if __name__ == "__main__":
    main()
