"""Exact-answer math rewards via math-verify.

``is_correct(response, answer)`` parses both with math-verify (LaTeX incl. ``\\boxed{}``,
fractions, plain expressions/numbers) and compares them symbolically, so ``\\frac{1}{2}``
matches ``0.5`` and ``\\boxed{12}`` matches ``12.0``. The response's *answer* is what
math-verify extracts: a boxed answer first, otherwise the last expression in the text. The
reference answer is one answer, written as MATH-style data sets write it (bare LaTeX such as
``2\\pi``, with or without ``$`` delimiters) or as a plain number/expression.

``math_reward`` scores 1.0/0.0 per completion against the dataset's ``answer`` column. By
default it scores only the final answer part when the completion has reasoning markup
(harmony final channel, or text after ``</think>``; see ``posttrain.rewards.format``), so
numbers in the reasoning do not count. ``last_number=True`` scores the last number literal of
the answer part instead of math-verify's last expression: for integer/decimal answers, where
echoing the question ("23 + 45") must not count as answering it (math-verify evaluates it).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import Any

from posttrain.rewards.format import final_text
from posttrain.rewards.text import completion_text

__all__ = ["digit_match", "digit_match_reward", "is_correct", "math_reward"]

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _configs():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import NormalizationConfig

    norm = NormalizationConfig(basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all")
    return [LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0), ExprExtractionConfig()]


@functools.lru_cache(maxsize=4096)
def _parse_gold(answer: str):
    """The reference answer as math-verify reads it.

    math-verify extracts LaTeX only from inside a math environment (its README: "the latex must be placed in latex
    environment to be parsable"; its own MATH tests write gold as ``$\\frac{14}{3}$``). MATH-style data sets write
    the answer bare (``2\\pi``, ``\\frac{1}{2}``), where expression extraction alone would read just the leading
    ``2``. So the answer is parsed inside ``$...$``: LaTeX extraction reads all of it, and the expression
    extractor remains math-verify's fallback when the LaTeX does not parse. Golds that already carry delimiters
    or ``\\boxed{}`` read the same way inside ``$...$``.
    """
    from math_verify import parse

    return parse(f"${answer}$", _configs())


def is_correct(response: str, answer: str | int | float) -> bool:
    """True when the answer extracted from ``response`` equals ``answer`` (math-verify)."""
    from math_verify import parse, verify

    gold = _parse_gold(str(answer).strip())
    if not gold:
        raise ValueError(f"math-verify could not parse the reference answer {answer!r}")
    if not response.strip():
        return False
    try:
        return bool(verify(gold, parse(response, _configs())))
    except Exception as e:  # math-verify/sympy edge cases (timeouts, odd LaTeX): not correct
        log.debug("math-verify failed on %r: %s", response[:200], e)
        return False


_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _last_number(text: str) -> str:
    """The last number literal in ``text`` (thousands separators dropped), or "" when there is none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


def math_reward(
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    *,
    final_only: bool = True,
    last_number: bool = False,
    **columns: Any,
) -> list[float]:
    """TRL reward: 1.0 if the completion's answer equals the row's ``answer`` column, else 0.0."""
    return [
        float(is_correct(_last_number(text) if last_number else text, a))
        for text, a in _answers_and_texts("math", completions, columns, final_only)
    ]


def _answers_and_texts(
    reward: str, completions: Sequence[Any], columns: dict[str, Any], final_only: bool
) -> list[tuple[str, Any]]:
    """(the completion's text, its final answer part when `final_only`; the row's ``answer``) per completion."""
    try:
        answers = columns["answer"]
    except KeyError:
        raise KeyError(f"{reward} reward needs dataset column 'answer'; got columns {sorted(columns)}") from None
    texts = [completion_text(c) for c in completions]
    return [(final_text(t) if final_only else t, a) for t, a in zip(texts, answers, strict=True)]


def digit_match(predicted: str, answer: str) -> float:
    """Partial credit for an integer answer: the fraction of digit places, aligned from the units, where the
    predicted number's digit equals the answer's, over the longer of the two (a missing digit counts as wrong);
    0.0 for no number, a sign that differs, or a non-integer answer; 1.0 exactly when the two are equal."""
    answer = answer.strip()
    if not predicted or not re.fullmatch(r"-?\d+", answer) or not re.fullmatch(r"-?\d+", predicted):
        return 0.0
    if predicted.startswith("-") != answer.startswith("-"):
        return 0.0
    p, a = predicted.lstrip("-").lstrip("0") or "0", answer.lstrip("-").lstrip("0") or "0"
    width = max(len(p), len(a))
    return sum(x == y for x, y in zip(p.rjust(width), a.rjust(width))) / width


def digit_match_reward(
    prompts: Sequence[Any] | None, completions: Sequence[Any], *, final_only: bool = True, **columns: Any
) -> list[float]:
    """TRL reward: `digit_match` of the completion's last number against the row's integer ``answer``: a dense
    signal for arithmetic a small model rarely gets exactly right (groups whose exact rewards are all 0 still rank
    their members)."""
    return [
        digit_match(_last_number(t), str(a))
        for t, a in _answers_and_texts("digit_match", completions, columns, final_only)
    ]
