"""Cluster-bootstrap statistics over per-item evaluation records (`evaluate.records`): means with CIs per group,
and paired differences between two arms scored on the same items.

A cluster is the unit that is resampled: in a SecAlign-style eval set every task instance (`cluster`) is attacked
by every family at every position, so its items are not independent; resampling whole task instances gives the
interval the experiment's sampling of tasks supports. Records without a cluster are their own cluster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from posttrain.analysis.stats import bootstrap_ci

N_BOOT = 2000


def cluster_bootstrap(
    values: Sequence[float], clusters: Sequence[Any], n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, lower, upper): the item mean and its 95% percentile-bootstrap interval, resampling whole clusters
    (`posttrain.analysis.stats.bootstrap_ci`)."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("no values to bootstrap")
    lo, hi = bootstrap_ci(v, n_boot=n_boot, seed=seed, clusters=list(clusters))
    return float(np.mean(v)), lo, hi


def _cluster(record: dict[str, Any]) -> Any:
    return record.get("cluster") or record.get("id")


def group_means(
    records: Sequence[dict[str, Any]], key: str, by: str | None = None, **kw: Any
) -> dict[str, dict[str, Any]]:
    """{group: {n, mean, ci}} of `record[key]` (bools count as 0/1) per value of `record[by]` (None: one group
    'all'); records where `key` is None are left out."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        if rec.get(key) is not None:
            groups["all" if by is None else str(rec.get(by))].append(rec)
    out = {}
    for group, recs in sorted(groups.items()):
        mean, lo, hi = cluster_bootstrap([float(r[key]) for r in recs], [_cluster(r) for r in recs], **kw)
        out[group] = {"n": len(recs), "mean": round(mean, 4), "ci": [round(lo, 4), round(hi, 4)]}
    return out


def paired_difference(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], key: str, by: str | None = None, **kw: Any
) -> dict[str, dict[str, Any]]:
    """{group: {n, mean, ci}} of `a[key] - b[key]` over the items (matched by `id`) both arms scored, per
    `by` group; raises when the two arms share no item."""
    b_by_id = {r["id"]: r for r in b}
    pairs = []
    for rec in a:
        other = b_by_id.get(rec["id"])
        if other is not None and rec.get(key) is not None and other.get(key) is not None:
            pairs.append({**rec, "diff": float(rec[key]) - float(other[key])})
    if not pairs:
        raise ValueError(f"the two arms share no scored item for {key!r}")
    return group_means(pairs, "diff", by, **kw)
