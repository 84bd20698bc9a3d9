"""Cluster bootstrap and paired differences over per-item records (what mode=eval and report.py print)."""

from __future__ import annotations

import numpy as np
import pytest

from posttrain.algos.contrastive.stats import cluster_bootstrap, group_means, paired_difference


def test_cluster_bootstrap_mean_and_interval():
    values = [1, 1, 1, 0, 0, 0, 1, 0]
    mean, lo, hi = cluster_bootstrap(values, list(range(8)), seed=3)
    assert mean == 0.5 and lo < 0.5 < hi
    assert cluster_bootstrap(values, list(range(8)), seed=3) == (mean, lo, hi)  # seeded
    assert cluster_bootstrap([0.25] * 6, list("aabbcc")) == (0.25, 0.25, 0.25)


def test_clusters_widen_the_interval_of_correlated_items():
    """20 task instances, 15 items each, every item of an instance alike: the data hold 20 observations, not
    300; resampling whole instances gives the interval of 20 (wider than the 300-item one), as a 20-item iid set."""
    rng = np.random.default_rng(0)
    per_task = rng.integers(0, 2, 20)
    values = np.repeat(per_task, 15)
    clusters = np.repeat(np.arange(20), 15)
    _, lo_c, hi_c = cluster_bootstrap(values, clusters, seed=0)
    _, lo_i, hi_i = cluster_bootstrap(values, np.arange(300), seed=0)
    _, lo_20, hi_20 = cluster_bootstrap(per_task, np.arange(20), seed=0)
    assert hi_c - lo_c > 3 * (hi_i - lo_i)
    assert abs((hi_c - lo_c) - (hi_20 - lo_20)) < 0.05


def test_group_means_and_paired_difference():
    a = [
        {"id": f"t{k}/f{f}", "cluster": f"t{k}", "attack_type": f"f{f}", "attack_success": (k + f) % 2 == 0}
        for k in range(6)
        for f in range(2)
    ]
    b = [{**r, "attack_success": True} for r in a]
    table = group_means(a, "attack_success", "attack_type")
    assert table["f0"]["n"] == 6 and table["f0"]["mean"] == 0.5 and table["f1"]["mean"] == 0.5
    diff = paired_difference(a, b, "attack_success", "attack_type")
    assert diff["f0"]["mean"] == -0.5 and diff["f0"]["ci"][1] <= 0
    assert paired_difference(a, b, "attack_success")["all"] == {"n": 12, "mean": -0.5, "ci": [-0.5, -0.5]}
    # only items both arms scored are paired
    assert paired_difference(a[:4], b, "attack_success")["all"]["n"] == 4
    with pytest.raises(ValueError, match="share no scored item"):
        paired_difference(a, [{**r, "id": "x" + r["id"]} for r in b], "attack_success")
