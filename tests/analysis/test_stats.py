"""`posttrain.analysis.stats` on synthetic data whose variance is known: the seeds x items bootstrap covers the
true mean where the items-only one does not, clusters widen it as they should, paired differences cancel shared
item effects, and the sign-flip test's p-values are the exact ones."""

from __future__ import annotations

import numpy as np
import pytest

from posttrain.analysis.stats import bootstrap_ci, difference_ci, seeds_items_ci, sign_flip_test

SEEDS, ITEMS = 5, 100
SD_SEED, SD_ITEM, SD_NOISE = 0.1, 0.2, 0.1


def _table(rng, sd_seed=SD_SEED, sd_item=SD_ITEM, seeds=SEEDS, items=ITEMS):
    return (
        0.5
        + rng.normal(0, sd_seed, (seeds, 1))
        + rng.normal(0, sd_item, (1, items))
        + rng.normal(0, SD_NOISE, (seeds, items))
    )


def test_the_seeds_x_items_interval_covers_the_mean_the_items_only_one_misses():
    """Var(grand mean) = sd_seed^2/S + sd_item^2/I + sd_noise^2/(S I): 0.049^2 here, mostly between seeds. Over
    200 synthetic experiments the two-way interval holds the true mean (0.5) most of the time and is about as wide
    as the true sd says; resampling items of the seed-averaged scores holds it far less often."""
    rng = np.random.default_rng(0)
    true_sd = np.sqrt(SD_SEED**2 / SEEDS + SD_ITEM**2 / ITEMS + SD_NOISE**2 / (SEEDS * ITEMS))
    both = items_only = 0
    widths = []
    for k in range(200):
        table = _table(rng)
        mean, (lo, hi) = seeds_items_ci(table, n_boot=400, seed=k)
        assert mean == pytest.approx(table.mean())
        both += lo <= 0.5 <= hi
        widths.append(hi - lo)
        ilo, ihi = bootstrap_ci(list(table.mean(axis=0)), n_boot=400, seed=k)
        items_only += ilo <= 0.5 <= ihi
    # 5 seeds: the bootstrap's seed variance is (S-1)/S of the truth and its quantiles are coarse, so a little under
    # items only: sd 0.021 of a true 0.049, so P(|Z| < 1.96 x 0.42) = 59% in theory
    assert both / 200 >= 0.8 and items_only / 200 <= 0.7, (both, items_only)
    assert 0.7 <= np.median(widths) / (2 * 1.96 * true_sd) <= 1.2


def test_without_a_seed_effect_the_interval_is_the_items_one():
    rng = np.random.default_rng(1)
    table = _table(rng, sd_seed=0.0, items=400)
    _, (lo, hi) = seeds_items_ci(table, n_boot=2000)
    expected = 2 * 1.96 * np.sqrt(SD_ITEM**2 / 400 + SD_NOISE**2 / (SEEDS * 400))
    assert (hi - lo) == pytest.approx(expected, rel=0.2)


def test_clustered_items_widen_the_interval_by_their_shared_effect():
    """20 documents x 10 questions, each document shifting its questions by N(0, 0.2): the cluster bootstrap's
    width follows the 20 documents, the per-question one the 200 questions (about sqrt(10)/sqrt(1+...) narrower)."""
    rng = np.random.default_rng(2)
    docs = np.repeat(np.arange(20), 10)
    table = 0.5 + rng.normal(0, 0.2, 20)[docs][None, :] + rng.normal(0, 0.05, (SEEDS, 200))
    _, (clo, chi) = seeds_items_ci(table, clusters=list(docs), n_boot=2000)
    _, (ilo, ihi) = seeds_items_ci(table, n_boot=2000)
    assert (chi - clo) / (ihi - ilo) > 2.5
    assert (chi - clo) == pytest.approx(2 * 1.96 * 0.2 / np.sqrt(20), rel=0.3)


def test_a_paired_difference_cancels_the_items_and_keeps_both_arms_seeds():
    rng = np.random.default_rng(3)
    items = rng.normal(0, 0.3, (1, ITEMS))  # shared by both arms: cancels in the paired difference
    a = 0.6 + items + rng.normal(0, 0.05, (SEEDS, 1)) + rng.normal(0, 0.05, (SEEDS, ITEMS))
    b = 0.5 + items + rng.normal(0, 0.05, (SEEDS, 1)) + rng.normal(0, 0.05, (SEEDS, ITEMS))
    diff, (lo, hi) = difference_ci(a, b, n_boot=2000)
    assert diff == pytest.approx(a.mean() - b.mean()) and lo < diff < hi
    # paired: 3.92 x sqrt(2 x 0.05^2/5) = 0.12 from the two arms' seeds; unpaired, the items would make it 0.21
    assert lo > 0.0 and hi - lo < 0.17
    with pytest.raises(ValueError, match="same items"):
        difference_ci(a, b[:, :10])


def test_sign_flip_p_values_are_exact():
    assert sign_flip_test([1.0] * 5) == pytest.approx(2 / 32)  # all five positive: 2 of 32 patterns as extreme
    assert sign_flip_test([1.0, -1.0, 1.0, -1.0]) == 1.0
    assert sign_flip_test([3.0, 1.0, 1.0, 1.0, 1.0]) == pytest.approx(2 / 32)
    many = sign_flip_test(list(np.random.default_rng(4).normal(0, 1, 40)), n_perm=20_000)
    assert 0.05 < many <= 1.0  # no effect: not significant


def test_weights_make_the_statistic_a_ratio():
    """answer-token NLL sums over token counts: sum(table) / sum(weights), the interval of that ratio."""
    rng = np.random.default_rng(5)
    tokens = rng.integers(1, 6, (SEEDS, ITEMS)).astype(float)
    nll = tokens * (2.0 + rng.normal(0, 0.1, (SEEDS, ITEMS)))
    mean, (lo, hi) = seeds_items_ci(nll, weights=tokens, n_boot=1000)
    assert mean == pytest.approx(nll.sum() / tokens.sum()) and lo < mean < hi and hi - lo < 0.05
    with pytest.raises(ValueError, match="weights of shape"):
        seeds_items_ci(nll, weights=tokens[:, :3])
