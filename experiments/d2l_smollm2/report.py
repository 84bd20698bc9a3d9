"""The tables and the plot of experiments/d2l_smollm2/ from its results folders (each holds a run's eval.json,
summary.json and, when recorded, loadavg.txt and time_v.txt):

    python experiments/d2l_smollm2/report.py experiments/d2l_smollm2/results/seed0 experiments/d2l_smollm2/results/seed1

Prints (markdown) the four conditions x runs table (accuracy and answer CE with 95% bootstrap CIs over questions),
the paired differences D2L - no context and D2L - other document (paired bootstrap over questions), and the
run-time table; writes `accuracy.png` (bars with CIs per condition and run) next to this file unless `--plot`
names another path. Every number comes from the files; the CIs are recomputed from eval.json's per-question
numbers with the same function the evaluation uses (`posttrain.analysis.stats.bootstrap_ci`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from posttrain.algos.d2l.evaluate import CONDITIONS
from posttrain.analysis.stats import bootstrap_ci

LABELS = {
    "no_context": "no context",
    "in_context": "document in context",
    "d2l": "D2L (own document)",
    "d2l_other_doc": "D2L (other document)",
}


def load(run: Path) -> dict[str, Any]:
    out = {"name": run.name, "eval": json.loads((run / "eval.json").read_text())}
    summary = run / "summary.json"
    out["summary"] = json.loads(summary.read_text()) if summary.is_file() else {}
    loads = run / "loadavg.txt"
    if loads.is_file():  # "HH:MM:SS 1min 5min 15min" per line
        one = [float(line.split()[1]) for line in loads.read_text().splitlines() if line.strip()]
        out["load"] = (min(one), sum(one) / len(one), max(one)) if one else None
    timing = run / "time_v.txt"
    if timing.is_file():
        text = timing.read_text()
        user = re.search(r"User time \(seconds\): ([\d.]+)", text)
        sys_ = re.search(r"System time \(seconds\): ([\d.]+)", text)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        out["cpu_s"] = float(user.group(1)) + float(sys_.group(1)) if user and sys_ else None
        out["wall"] = wall.group(1) if wall else None
        out["rss_gb"] = int(rss.group(1)) / 1e6 if rss else None
    return out


def per_condition(ev: dict[str, Any], cond: str) -> dict[str, Any]:
    per = ev["per_question"]
    correct = [float(p[cond]["correct"]) for p in per]
    nll, tokens = [p[cond]["nll"] for p in per], [float(p[cond]["tokens"]) for p in per]
    return {
        "acc": sum(correct) / len(correct),
        "acc_ci": bootstrap_ci(correct),
        "ce": sum(nll) / sum(tokens),
        "ce_ci": bootstrap_ci(nll, tokens),
    }


def paired(ev: dict[str, Any], a: str, b: str) -> tuple[float, list[float]]:
    diff = [float(p[a]["correct"]) - float(p[b]["correct"]) for p in ev["per_question"]]
    return sum(diff) / len(diff), bootstrap_ci(diff)


def fmt_ci(x: float, ci: list[float], digits: int = 3) -> str:
    return f"{x:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def tables(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| run | condition | accuracy [95% CI] | answer CE, nats/token [95% CI] | exact match |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        ev = run["eval"]
        for cond in CONDITIONS:
            s = per_condition(ev, cond)
            em = ev[cond].get("exact_match", float("nan"))
            lines.append(
                f"| {run['name']} | {LABELS[cond]} | {fmt_ci(s['acc'], s['acc_ci'])} | "
                f"{fmt_ci(s['ce'], s['ce_ci'])} | {em:.3f} |"
            )
    lines += [
        "",
        "| run | questions (documents) | D2L - no context, accuracy [paired 95% CI] "
        "| D2L - other document [paired 95% CI] "
        "| D2L / in context, accuracy |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        ev = run["eval"]
        d_nc, ci_nc = paired(ev, "d2l", "no_context")
        d_od, ci_od = paired(ev, "d2l", "d2l_other_doc")
        ratio = ev["d2l"]["accuracy"] / max(ev["in_context"]["accuracy"], 1e-12)
        lines.append(
            f"| {run['name']} | {ev['num_questions']} ({ev['num_docs']}) | {fmt_ci(d_nc, ci_nc, 3)} | "
            f"{fmt_ci(d_od, ci_od, 3)} | {ratio:.2f} |"
        )
    lines += [
        "",
        "| run | internalize, ms/document (median, batch of 1) | train steps | train runtime, s | "
        "wall (all) | CPU user+sys, s | peak RSS, GB | 1-min load avg min/mean/max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        s, ev = run["summary"], run["eval"]
        load = run.get("load")
        load_s = f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}" if load else "-"
        cpu = f"{run['cpu_s']:.0f}" if run.get("cpu_s") else "-"
        rss = f"{run['rss_gb']:.1f}" if run.get("rss_gb") else "-"
        runtime = s.get("train_runtime", s.get("runtime_s"))
        steps = s.get("final_step", s.get("global_step", "-"))
        lines.append(
            f"| {run['name']} | {ev['internalize_ms_per_doc']:.0f} | {steps} | "
            f"{runtime if runtime is None else round(float(runtime))} | {run.get('wall', '-')} | {cpu} | {rss} | "
            f"{load_s} |"
        )
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(runs)
    for metric, ax, title in (("acc", axes[0], "answer accuracy"), ("ce", axes[1], "answer CE (nats/token)")):
        for k, run in enumerate(runs):
            stats = [per_condition(run["eval"], c) for c in CONDITIONS]
            values = [s[metric] for s in stats]
            lo = [v - s[f"{metric}_ci"][0] for v, s in zip(values, stats)]
            hi = [s[f"{metric}_ci"][1] - v for v, s in zip(values, stats)]
            xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(CONDITIONS))]
            ax.bar(xs, values, width, yerr=[lo, hi], capsize=3, label=run["name"])
        ax.set_xticks(range(len(CONDITIONS)))
        ax.set_xticklabels([LABELS[c].replace(" (", "\n(") for c in CONDITIONS], fontsize=8)
        ax.set_title(f"{title}, 95% bootstrap CI")
    axes[0].set_ylim(0, 1)
    axes[1].set_yscale("log")  # CE of a bare-answer run (a few tokens) sits far above the sentence runs
    axes[0].legend()
    fig.suptitle("D2L on SmolLM2-135M-Instruct, held-out documents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--plot", type=Path, default=Path(__file__).with_name("accuracy.png"))
    args = parser.parse_args()
    runs = [load(r) for r in args.runs]
    print(tables(runs))
    plot(runs, args.plot)
    print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
