"""Confidence intervals for evaluation results: one bootstrap for every experiment's per-example numbers."""

from __future__ import annotations

import random


def bootstrap_ci(
    values: list[float], weights: list[float] | None = None, n_boot: int = 2000, seed: int = 0
) -> list[float]:
    """95% percentile-bootstrap CI of `sum(values) / sum(weights)`, resampling examples (questions, problems).

    weights None: the mean; e.g. values = a question's answer-token NLL sum and weights = its token count give the
    token-mean loss. A paired difference: values = per-example differences of two conditions."""
    w = weights or [1.0] * len(values)
    rng = random.Random(seed)
    n = len(values)
    stats = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(sum(values[i] for i in idx) / max(sum(w[i] for i in idx), 1e-12))
    stats.sort()
    return [stats[int(0.025 * n_boot)], stats[int(0.975 * n_boot) - 1]]
