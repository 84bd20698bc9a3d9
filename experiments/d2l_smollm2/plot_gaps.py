"""D2L runs' document-dependence monitors side by side: the held-out gap (the answer CE of the first
`algo.monitor_docs` held-out documents' questions with another document's LoRA minus with their own; 0: the hypernet
emits one LoRA for every document) against the training step, one line per run.

    python experiments/d2l_smollm2/plot_gaps.py "cold start=results/probes/three_facts_8000docs_1000steps" \
        "after one-fact documents=results/probes/curriculum_fact1_then_facts3/stage2_facts3_1000steps" --out gaps.png

`LABEL=RUN_DIR@STEP` draws a run that continued another (`algo.init_hypernet`) from STEP on: its step 0 is STEP.
A RUN_DIR is a raw run folder (its eval_metrics.jsonl): those of the examples are not in git since 2026-12-01.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posttrain.callbacks import read_metrics


def gap_series(run: Path, key: str = "eval_heldout_gap") -> list[tuple[int, float]]:
    """(step, gap) of each monitor evaluation in `run`'s eval_metrics.jsonl."""
    rows = read_metrics(Path(run) / "eval_metrics.jsonl")
    series = [(int(r["step"]), float(r[key])) for r in rows if key in r]
    if not series:
        raise SystemExit(f"{run}: no {key} in eval_metrics.jsonl (was algo.monitor_steps set?)")
    return series


def run_spec(spec: str) -> tuple[str, Path, int]:
    """LABEL=RUN_DIR[@STEP] -> (label, run directory, the step its own step 0 continues)."""
    label, sep, run = spec.partition("=")
    if not sep or not run:
        raise SystemExit(f"{spec}: expected LABEL=RUN_DIR[@STEP]")
    head, at, start = run.rpartition("@")
    if at and start.isdigit():
        return label, Path(head), int(start)
    return label, Path(run), 0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="LABEL=RUN_DIR[@STEP] (a run directory with eval_metrics.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--split", choices=["heldout", "train"], default="heldout")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, run, start in map(run_spec, args.runs):
        steps, gaps = zip(*gap_series(run, f"eval_{args.split}_gap"), strict=True)
        ax.plot([start + s for s in steps], gaps, marker="o", label=label)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("training step (a run given as RUN_DIR@STEP starts at STEP)")
    ax.set_ylabel(f"{args.split} gap: other doc's CE - own (nats)")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
