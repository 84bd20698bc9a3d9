"""Answer scoring (SQuAD v1.1's normalisation, exact match and F1; containment) and the document-clustered
bootstrap."""

from __future__ import annotations

import pytest

from posttrain.algos.d2l.scoring import (
    best_over,
    contains_answer,
    exact_match_score,
    f1_score,
    normalize_answer,
    score,
)
from posttrain.analysis.stats import bootstrap_ci


def test_squad_normalisation_exact_match_and_f1():
    assert normalize_answer("  The Cat,  sat!") == "cat sat"
    assert normalize_answer("an apple a day") == "apple day"
    assert exact_match_score("An apple.", "apple") and not exact_match_score("apples", "apple")
    assert exact_match_score("4,271", "4271")  # punctuation goes, digits stay
    # pred {cat, sat, on, mat} vs gold {cat, on, mat}: P = 3/4, R = 1
    assert f1_score("the cat sat on the mat", "cat on mat") == pytest.approx(2 * 0.75 / 1.75)
    # bags, not sets: x x y vs x y y share one x and one y -> P = R = 2/3
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_score("dog", "cat") == 0.0 and f1_score("the", "cat") == 0.0  # nothing left after normalising
    assert best_over(f1_score, "Port Zea", ["Lake Zea", "Port Zea"]) == 1.0


def test_containment_is_whole_words_after_normalising():
    assert contains_answer("Mira Kolvent was born in Brisdale.", "Brisdale")
    assert contains_answer("It employs 4271 people.", "4,271")
    assert contains_answer("VELMORA WORKS", "the Velmora Works")
    assert not contains_answer("She studied education.", "cat")  # a substring of a word does not count
    assert not contains_answer("He lives in Rome.", "Oslo")
    assert not contains_answer("anything", "")
    assert score("He was born in Port Zea.", ["Port Zea"]) == {"correct": 1.0, "em": 0.0, "f1": pytest.approx(0.5)}


def test_clustered_bootstrap_resamples_documents():
    # 20 documents x 10 questions, every question of a document right or wrong together: 20 independent units
    values = [float(d % 2) for d in range(20) for _ in range(10)]
    docs = [d for d in range(20) for _ in range(10)]
    lo_c, hi_c = bootstrap_ci(values, clusters=docs)
    lo_i, hi_i = bootstrap_ci(values)
    assert lo_c < 0.5 < hi_c and lo_i < 0.5 < hi_i
    assert hi_c - lo_c > 2.5 * (hi_i - lo_i)  # sqrt(10) wider in theory: 200 questions are 20 samples
    assert 0.24 <= lo_c <= 0.35 and 0.65 <= hi_c <= 0.76  # binomial with n = 20: 0.5 +- 1.96 * 0.112
    assert bootstrap_ci([0.25] * 6, clusters=list("aabbcc")) == [0.25, 0.25]
    assert bootstrap_ci(values, clusters=docs) == [lo_c, hi_c]  # seeded
    # a ratio (NLL sums over token counts): two documents with 1.0 and 3.0 nats/token, weighted by their tokens
    lo, hi = bootstrap_ci([2.0, 2.0, 6.0, 6.0], [2.0, 2.0, 2.0, 2.0], clusters=[0, 0, 1, 1])
    assert lo == pytest.approx(1.0) and hi == pytest.approx(3.0)
    with pytest.raises(ValueError, match="cluster labels"):
        bootstrap_ci([1.0, 2.0], clusters=[0])
