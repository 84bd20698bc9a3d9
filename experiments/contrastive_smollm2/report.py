"""Tables and plot of experiments/contrastive_smollm2 from its results files, with 95% bootstrap CIs over examples.

    python experiments/contrastive_smollm2/report.py        # prints the tables, writes results/report.md + .png

Reads results/<run>/eval_{init,before,after}.jsonl (one record per eval triplet, written by the runs) and
summary.json / metrics.jsonl / time_v.txt / loadavg.txt. Every number in the README comes from this output.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
RES = HERE / "results"
N_BOOT = 10_000
METRICS = (  # record key -> column
    ("attack_success", "held-out ASR"),
    ("benign_word", "benign utility (word)"),
    ("benign_exact", "benign utility (exact)"),
    ("injected_word", "utility under injection (word)"),
)


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def ci(xs: list[float], seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the mean, resampling examples."""
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(N_BOOT))
    return means[int(0.025 * N_BOOT)], means[int(0.975 * N_BOOT) - 1]


def fmt(xs: list[float]) -> str:
    lo, hi = ci(xs)
    return f"{mean(xs):.3f} [{lo:.3f}, {hi:.3f}]"


ORDER = (  # run.sh's order; other folders follow by name
    "base",
    "contrastive_s0",
    "contrastive_s1",
    "lm_only_s0",
    "lm_only_s1",
    "contrastive_lminj_s0",
    "lm_only_lminj_s0",
    "contrastive_w01_s0",
)


def runs() -> dict[str, Path]:
    def key(p: Path) -> tuple[int, str]:
        return (ORDER.index(p.name) if p.name in ORDER else len(ORDER), p.name)

    return {p.name: p for p in sorted(RES.iterdir(), key=key) if p.is_dir()}


def label(name: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.+)_s(\d+)", name)
    return (m.group(1), m.group(2)) if m else (name, "-")


def base_table(out: list[str]) -> None:
    """The base model on every task kind and attack type (results/base/eval_init.jsonl)."""
    path = RES / "base" / "eval_init.jsonl"
    if not path.is_file():
        return
    recs = load(path)
    out.append(f"### Base model, every task kind and attack type (n={len(recs)}, results/base/eval_init.jsonl)\n")
    out.append("| group | n | ASR [95% CI] | benign utility, word [95% CI] | benign utility, exact |")
    out.append("|---|---|---|---|---|")
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        groups["all"].append(r)
        groups[f"task={r['task']}"].append(r)
        groups[f"attack={r['attack_type']}"].append(r)
        groups["held-out templates + witnesses" if r["heldout"] else "training templates + witnesses"].append(r)
    order = ["all"] + sorted(g for g in groups if g != "all")
    for g in order:
        rs = groups[g]
        asr = [float(r["attack_success"]) for r in rs]
        util = [float(r["benign_word"]) for r in rs]
        exact = mean([float(r["benign_exact"]) for r in rs])
        out.append(f"| {g} | {len(rs)} | {fmt(asr)} | {fmt(util)} | {exact:.3f} |")
    out.append("")


def main_table(out: list[str]) -> dict[str, dict]:
    """Before (the base model: every run's eval_before is the same) and after, per run."""
    rows: dict[str, dict] = {}
    for name, path in runs().items():
        if name == "base":
            continue
        if (path / "eval_after.jsonl").is_file():
            rows[name] = {"before": load(path / "eval_before.jsonl"), "after": load(path / "eval_after.jsonl")}
        elif (path / "eval_checkpoint-120.jsonl").is_file():  # scored afterwards with mode=eval (no "before")
            rows[name] = {"before": None, "after": load(path / "eval_checkpoint-120.jsonl")}
    if not rows:
        return rows
    first = next(r["before"] for r in rows.values() if r["before"] is not None)
    for r in rows.values():
        r["before"] = r["before"] if r["before"] is not None else first
    for name, r in rows.items():  # the same eval triplets in every run; the base replies are deterministic
        assert [x["id"] for x in r["before"]] == [x["id"] for x in first], name
    n = len(first)
    out.append(f"### Held-out templates and witnesses (n={n} eval triplets, the same in every run), 95% CIs\n")
    out.append("| weights | seed | " + " | ".join(c for _, c in METRICS) + " |")
    out.append("|---|---|" + "---|" * len(METRICS))
    table = [("base (before training)", "-", first)] + [(*label(k), v["after"]) for k, v in rows.items()]
    for lab, seed, recs in table:
        cells = [fmt([float(x[k]) for x in recs]) for k, _ in METRICS]
        out.append(f"| {lab} | {seed} | " + " | ".join(cells) + " |")
    out.append("")
    return rows


def paired(out: list[str], rows: dict[str, dict]) -> None:
    """Contrastive minus LM-only, same seed, paired over the same eval triplets."""
    pairs = [(k, k.replace("contrastive", "lm_only", 1)) for k in rows if k.startswith("contrastive")]
    pairs = [(a, b) for a, b in pairs if b in rows]
    if not pairs:
        return
    out.append("### Contrastive minus LM-only (same seed, paired over eval triplets), 95% CIs\n")
    out.append("| pair | " + " | ".join(f"Δ {c}" for _, c in METRICS) + " |")
    out.append("|---|" + "---|" * len(METRICS))
    for a, b in pairs:
        cells = []
        for k, _ in METRICS:
            d = [float(x[k]) - float(y[k]) for x, y in zip(rows[a]["after"], rows[b]["after"], strict=True)]
            lo, hi = ci(d)
            cells.append(f"{mean(d):+.3f} [{lo:+.3f}, {hi:+.3f}]")
        out.append(f"| {a} − {b} | " + " | ".join(cells) + " |")
    out.append("")


def breakdown(out: list[str], rows: dict[str, dict]) -> None:
    """Held-out ASR per attack type and per task kind, for the base weights and every trained run."""
    if not rows:
        return
    first = next(iter(rows.values()))["before"]
    table = [("base", first)] + [(k, v["after"]) for k, v in rows.items()]
    groups = sorted({f"attack={x['attack_type']}" for x in first} | {f"task={x['task']}" for x in first})

    def member(x: dict, g: str) -> bool:
        key, value = g.split("=")
        return x["attack_type" if key == "attack" else "task"] == value

    out.append("### Held-out ASR by attack type and task kind\n")
    out.append("| weights | " + " | ".join(f"{g} (n={sum(member(x, g) for x in first)})" for g in groups) + " |")
    out.append("|---|" + "---|" * len(groups))
    for name, recs in table:
        cells = [f"{mean([float(x['attack_success']) for x in recs if member(x, g)]):.3f}" for g in groups]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")


def run_facts(out: list[str]) -> None:
    """Wall time, CPU time, peak memory, load average, steps and last-window losses per run."""
    out.append("### Runs (wall clock on the shared 2-core machine; 1-min load average sampled every 30 s)\n")
    out.append(
        "| run | wall | user+sys CPU s | peak RSS GB | load avg (min-max) | steps | s/step | loss terms, last 5 logs |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for name, path in runs().items():
        tv = (path / "time_v.txt").read_text() if (path / "time_v.txt").is_file() else ""
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", tv)
        cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): (\S+)", tv))
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv)
        loads = []
        if (path / "loadavg.txt").is_file():
            loads = [float(ln.split()[1]) for ln in (path / "loadavg.txt").read_text().splitlines() if ln.strip()]
        steps = sps = terms = "-"
        if (path / "metrics.jsonl").is_file():
            ms = [m for m in load(path / "metrics.jsonl") if "loss" in m]
            last = ms[-5:]
            if last:
                steps = str(last[-1]["step"])
                keys = [k for k in ("nce", "lm_loss", "nce_acc", "sim_pos", "sim_inj") if k in last[-1]]
                terms = ", ".join(f"{k} {mean([m[k] for m in last]):.3f}" for k in keys)
        summ = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
        if summ.get("runtime_s") and steps != "-":
            sps = f"{summ['runtime_s'] / int(steps):.1f}"
        load_s = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
        out.append(
            f"| {name} | {wall.group(1) if wall else '-'} | {cpu:.0f} | "
            f"{int(rss.group(1)) / 1e6 if rss else 0:.1f} | {load_s} | {steps} | {sps} | {terms} |"
        )
    out.append("")


def plot(rows: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return
    first = next(iter(rows.values()))["before"]
    bars = [("base", first)] + [(k, v["after"]) for k, v in rows.items()]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, title) in zip(axes, [METRICS[0], METRICS[1], METRICS[3]]):
        for i, (name, recs) in enumerate(bars):
            xs = [float(x[key]) for x in recs]
            m, (lo, hi) = mean(xs), ci(xs)
            color = "grey" if name == "base" else ("tab:blue" if name.startswith("contrastive") else "tab:orange")
            hatch = "//" if "lminj" in name else (".." if "_w" in name else None)  # LM loss on injected rows / dose
            ax.bar(i, m, color=color, hatch=hatch, edgecolor="white", yerr=[[m - lo], [hi - m]], capsize=4)
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"SmolLM2-135M-Instruct, held-out templates + witnesses (n={len(first)}), 95% bootstrap CIs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    out: list[str] = []
    base_table(out)
    rows = main_table(out)
    paired(out, rows)
    breakdown(out, rows)
    run_facts(out)
    text = "\n".join(out)
    print(text)
    if "--no-write" not in sys.argv:
        (RES / "report.md").write_text(text + "\n")
        plot(rows, RES / "results.png")


if __name__ == "__main__":
    main()
