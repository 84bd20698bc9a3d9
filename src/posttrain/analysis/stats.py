"""Confidence intervals for evaluation results: one bootstrap for every experiment's per-example numbers."""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

import numpy as np


def bootstrap_ci(
    values: list[float],
    weights: list[float] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
) -> list[float]:
    """95% percentile-bootstrap CI of `sum(values) / sum(weights)`, resampling examples (questions, problems).

    weights None: the mean; e.g. values = a question's answer-token NLL sum and weights = its token count give the
    token-mean loss. A paired difference: values = per-example differences of two conditions.
    `clusters` (one label per example, e.g. its document): resample whole clusters instead of examples, the interval
    for examples that are not independent (several questions about one document)."""
    if clusters is not None:
        return _cluster_ci(values, weights, clusters, n_boot, seed)
    w = weights or [1.0] * len(values)
    rng = random.Random(seed)
    n = len(values)
    stats = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(sum(values[i] for i in idx) / max(sum(w[i] for i in idx), 1e-12))
    stats.sort()
    return [stats[int(0.025 * n_boot)], stats[int(0.975 * n_boot) - 1]]


def _cluster_ci(
    values: Sequence[float],
    weights: Sequence[float] | None,
    clusters: Sequence[Hashable],
    n_boot: int,
    seed: int,
) -> list[float]:
    if len(clusters) != len(values):
        raise ValueError(f"{len(clusters)} cluster labels for {len(values)} values")
    _, index = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    num = np.bincount(index, weights=np.asarray(values, dtype=float))
    den = np.bincount(index, weights=np.asarray(weights if weights is not None else [1.0] * len(values), dtype=float))
    draw = np.random.default_rng(seed).integers(0, len(num), size=(n_boot, len(num)))
    stats = num[draw].sum(axis=1) / np.maximum(den[draw].sum(axis=1), 1e-12)
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return [float(lo), float(hi)]
