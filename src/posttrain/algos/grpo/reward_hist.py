"""Reward histograms by constraint type (IFEval `instruction_id_list` prefix, else the data set's name).

What is binned is the weighted total reward each completion's advantage comes from (`sum_i w_i r_i`, TRL's
`reward_weights`). The bins are 5 equal parts of that total's range, taken from each reward function's declared
`value_range` (the registry's `RANGES`, carried by `posttrain.rewards.BoundReward`):
`[sum_i min(w_i lo_i, w_i hi_i), sum_i max(w_i lo_i, w_i hi_i)]`, the same bins at every step. A reward function
that declares no range (a plugin registered without one, a reward model) makes the bins the observed
[min, max] of each logging window instead; their edges are in the key names. Values outside the range count in
the end bins.

Counts go into the logs as `<prefix>/<type>/<lo>-<hi>` per logging window (`reward_hist/...` for training rows of
`metrics.jsonl`, `eval_reward_hist/...` for evaluation: the two are kept apart); with wandb active the raw values
are also logged as `wandb.Histogram`s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

BINS = 5


def constraint_types(row: dict[str, Any], default: str) -> list[str]:
    ids = row.get("instruction_id_list")
    if not ids:
        return [default]
    return sorted({str(i).split(":")[0] for i in ids})


def total_range(funcs: Sequence[Callable], weights: Sequence[float]) -> tuple[float, float] | None:
    """Range of `sum_i w_i f_i` from each function's `value_range`; None when any function declares none."""
    lo = hi = 0.0
    for fn, w in zip(funcs, weights):
        declared = getattr(fn, "value_range", None)
        if declared is None:
            return None
        a, b = (float(w) * float(x) for x in declared)
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def bin_edges(value_range: tuple[float, float], bins: int = BINS) -> tuple[float, ...]:
    """`bins` equal bins over `value_range`; one bin when the range is a single value."""
    lo, hi = value_range
    if hi <= lo:
        return (lo, lo)
    return tuple(lo + (hi - lo) * k / bins for k in range(bins)) + (hi,)


def bucket(value: float, edges: Sequence[float]) -> int:
    """Index of the bin holding `value`; values outside [edges[0], edges[-1]] go to the end bins."""
    for k in range(1, len(edges) - 1):
        if value < edges[k]:
            return k - 1
    return len(edges) - 2


class RewardHistogram:
    """Rewards of one mode (train or eval) since the last `flush`, by constraint type."""

    def __init__(self, value_range: tuple[float, float] | None = None, prefix: str = "reward_hist", bins: int = BINS):
        self.value_range = value_range
        self.prefix = prefix
        self.bins = bins
        self.values: dict[str, list[float]] = defaultdict(list)

    def add(self, types: Sequence[Sequence[str]], rewards: Sequence[float]) -> None:
        """One reward per completion, with the constraint types of its row."""
        if len(types) != len(rewards):
            raise ValueError(f"{len(rewards)} rewards for {len(types)} rows")
        for row_types, r in zip(types, rewards):
            for t in row_types:
                self.values[t].append(float(r))

    def counts(self) -> dict[str, int]:
        values = [v for vals in self.values.values() for v in vals if not math.isnan(v)]
        if not values:
            return {}
        edges = bin_edges(self.value_range or (min(values), max(values)), self.bins)
        names = [f"{lo:g}-{hi:g}" for lo, hi in zip(edges[:-1], edges[1:])]
        out: dict[str, int] = {}
        for t, vals in sorted(self.values.items()):
            c = [0] * len(names)
            for v in vals:
                if not math.isnan(v):
                    c[bucket(v, edges)] += 1
            out.update({f"{self.prefix}/{t}/{n}": k for n, k in zip(names, c)})
        return out

    def flush(self, wandb_run: Any = None) -> dict[str, int]:
        counts = self.counts()
        if wandb_run is not None and self.values:
            import wandb

            key = self.prefix.replace("eval_", "eval/", 1)  # where HF's wandb callback puts eval_ metrics
            wandb_run.log({f"{key}/{t}": wandb.Histogram(v) for t, v in self.values.items()}, commit=False)
        self.values.clear()
        return counts
