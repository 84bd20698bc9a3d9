"""Reward histograms by constraint type (IFEval `instruction_id_list` prefix, else the data set's name).

Counts go into `metrics.jsonl` as `reward_hist/<type>/<lo>-<hi>` per logging window; with wandb active the raw
values are also logged as `wandb.Histogram`s.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def constraint_types(row: dict[str, Any], default: str) -> list[str]:
    ids = row.get("instruction_id_list")
    if not ids:
        return [default]
    return sorted({str(i).split(":")[0] for i in ids})


def bucket(value: float, edges: Sequence[float] = EDGES) -> int:
    """Index of the bin holding `value`; values outside [edges[0], edges[-1]] go to the end bins."""
    for k in range(1, len(edges) - 1):
        if value < edges[k]:
            return k - 1
    return len(edges) - 2


class RewardHistogram:
    def __init__(self, default_type: str = "all", edges: Sequence[float] = EDGES):
        self.default_type = default_type
        self.edges = tuple(edges)
        self.values: dict[str, list[float]] = defaultdict(list)

    def add(self, rows: Sequence[dict[str, Any]], rewards: Sequence[float]) -> None:
        for row, r in zip(rows, rewards):
            for t in constraint_types(row, self.default_type):
                self.values[t].append(float(r))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        names = [f"{lo:g}-{hi:g}" for lo, hi in zip(self.edges[:-1], self.edges[1:])]
        for t, vals in sorted(self.values.items()):
            c = [0] * len(names)
            for v in vals:
                c[bucket(v, self.edges)] += 1
            out.update({f"reward_hist/{t}/{n}": k for n, k in zip(names, c)})
        return out

    def flush(self, wandb_run: Any = None) -> dict[str, int]:
        counts = self.counts()
        if wandb_run is not None and self.values:
            import wandb

            wandb_run.log({f"reward_hist/{t}": wandb.Histogram(v) for t, v in self.values.items()}, commit=False)
        self.values.clear()
        return counts
