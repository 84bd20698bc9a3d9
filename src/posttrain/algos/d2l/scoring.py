"""Answer scoring: SQuAD v1.1's exact match and token F1 (a faithful transcription of the official evaluation
script, `evaluate-v1.1.py`: `normalize_answer`, `exact_match_score`, `f1_score`, the max over the gold answers; as
fractions, not percentages), and containment accuracy (a gold answer occurs in the response as whole words after the
same normalisation: "Mira Kolvent was born in Brisdale." is right for "Brisdale").

The `evaluate` package is not a dependency and its "squad" metric would fetch the script from the hub; `datasets`
no longer ships metrics (since 3.0), hence the transcription.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, the articles a/an/the and extra whitespace (SQuAD v1.1)."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    """Harmonic mean of token precision and recall over the normalised bags of words."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def contains_answer(prediction: str, ground_truth: str) -> bool:
    """The normalised answer occurs in the normalised response as a run of whole words."""
    gold = normalize_answer(ground_truth)
    return bool(gold) and f" {gold} " in f" {normalize_answer(prediction)} "


def best_over(metric: Callable[[str, str], float], prediction: str, ground_truths: Sequence[str]) -> float:
    """`metric_max_over_ground_truths`: the best score against any gold answer."""
    return max(float(metric(prediction, gt)) for gt in ground_truths)


def score(prediction: str, ground_truths: Sequence[str]) -> dict[str, float]:
    """{correct (containment), em, f1} of one response against its gold answers."""
    return {
        "correct": best_over(contains_answer, prediction, ground_truths),
        "em": best_over(exact_match_score, prediction, ground_truths),
        "f1": best_over(f1_score, prediction, ground_truths),
    }
