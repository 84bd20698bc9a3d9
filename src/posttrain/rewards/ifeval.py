"""IFEval verifiable rewards: ``follows`` and the fraction-of-instructions rewards.

``follows(instruction_id, kwargs, response, prompt=None)`` is IFEval's *strict* verdict
for one instruction: an empty (whitespace-only) response never follows, otherwise the
instruction's checker decides (``posttrain.rewards.ifeval_checks``). ``follows_loose`` is
IFEval's *loose* verdict: the instruction counts as followed if the strict check passes on
any of eight variants of the response (as is, without its first line, without its last
line, without both; each also with every ``*`` removed).

The rewards (TRL signature ``f(prompts, completions, **columns) -> list[float]``) read the
dataset columns ``instruction_id_list`` (list of ids per row) and ``kwargs`` (list of
dicts per row, ``None`` values ignored, as in ``google/IFEval``) and score the fraction of
a row's instructions followed (or 1/0 for all of them with ``all_or_nothing=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posttrain.rewards.ifeval_checks import INSTRUCTIONS, check
from posttrain.rewards.text import completion_text, prompt_text

__all__ = [
    "INSTRUCTION_IDS",
    "follows",
    "follows_loose",
    "fraction_followed",
    "ifeval_loose",
    "ifeval_metrics",
    "ifeval_strict",
    "loose_variants",
    "verdicts",
    "verdicts_by_instruction",
]

#: The 25 instruction ids of Google's IFEval registry.
INSTRUCTION_IDS: tuple[str, ...] = tuple(INSTRUCTIONS)


def _with_prompt(instruction_id: str, kwargs: dict[str, Any] | None, prompt: str | None) -> dict[str, Any] | None:
    if instruction_id == "combination:repeat_prompt" and not (kwargs or {}).get("prompt_to_repeat") and prompt:
        return {**(kwargs or {}), "prompt_to_repeat": prompt}
    return kwargs


def follows(instruction_id: str, kwargs: dict[str, Any] | None, response: str, prompt: str | None = None) -> bool:
    """IFEval strict verdict. ``prompt`` stands in for ``prompt_to_repeat`` when that kwarg is absent."""
    if not response.strip():
        return False
    return check(instruction_id, _with_prompt(instruction_id, kwargs, prompt), response)


def loose_variants(response: str) -> list[str]:
    """The eight responses IFEval's loose metric tries, in its order."""
    lines = response.split("\n")
    no_first = "\n".join(lines[1:]).strip()
    no_last = "\n".join(lines[:-1]).strip()
    no_both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        no_first,
        no_last,
        no_both,
        no_first.replace("*", ""),
        no_last.replace("*", ""),
        no_both.replace("*", ""),
    ]


def follows_loose(instruction_id: str, kwargs: dict[str, Any] | None, response: str, prompt: str | None = None) -> bool:
    """IFEval loose verdict: strict verdict on any of ``loose_variants(response)``."""
    return any(follows(instruction_id, kwargs, r, prompt) for r in loose_variants(response))


def verdicts(
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[dict[str, Any] | None] | None,
    response: str,
    prompt: str | None = None,
    loose: bool = False,
) -> list[bool]:
    """Per-instruction verdicts for one response (``kwargs_list`` aligned with ``instruction_ids``)."""
    kwargs_list = list(kwargs_list) if kwargs_list is not None else [None] * len(instruction_ids)
    if len(kwargs_list) != len(instruction_ids):
        raise ValueError(f"{len(instruction_ids)} instruction ids but {len(kwargs_list)} kwargs dicts")
    fn = follows_loose if loose else follows
    return [fn(i, k, response, prompt) for i, k in zip(instruction_ids, kwargs_list)]


def fraction_followed(
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[dict[str, Any] | None] | None,
    response: str,
    prompt: str | None = None,
    loose: bool = False,
    all_or_nothing: bool = False,
) -> float:
    """Fraction of the instructions followed (or 1.0/0.0 for all of them)."""
    v = verdicts(instruction_ids, kwargs_list, response, prompt, loose)
    if not v:
        raise ValueError("no instructions to score")
    if all_or_nothing:
        return float(all(v))
    return sum(v) / len(v)


def _score(prompts, completions, columns: dict[str, Any], loose: bool, all_or_nothing: bool) -> list[float]:
    try:
        ids, kws = columns["instruction_id_list"], columns["kwargs"]
    except KeyError as e:
        raise KeyError(f"IFEval reward needs dataset column {e.args[0]!r}; got columns {sorted(columns)}") from None
    prompts = prompts if prompts is not None else [None] * len(completions)
    return [
        fraction_followed(i, k, completion_text(c), prompt_text(p), loose=loose, all_or_nothing=all_or_nothing)
        for p, c, i, k in zip(prompts, completions, ids, kws, strict=True)
    ]


def ifeval_strict(
    prompts: Sequence[Any] | None, completions: Sequence[Any], all_or_nothing: bool = False, **columns: Any
) -> list[float]:
    """TRL reward: fraction of each row's IFEval instructions followed (strict)."""
    return _score(prompts, completions, columns, loose=False, all_or_nothing=all_or_nothing)


def ifeval_loose(
    prompts: Sequence[Any] | None, completions: Sequence[Any], all_or_nothing: bool = False, **columns: Any
) -> list[float]:
    """TRL reward: fraction of each row's IFEval instructions followed (loose)."""
    return _score(prompts, completions, columns, loose=True, all_or_nothing=all_or_nothing)


def verdicts_by_instruction(
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    instruction_id_list: Sequence[Sequence[str]],
    kwargs: Sequence[Sequence[dict[str, Any] | None]],
    loose: bool = False,
) -> dict[str, list[float]]:
    """Batch verdicts grouped by instruction id (1.0 followed / 0.0 not), for per-constraint
    logging (histograms, bucket counts): ``{"punctuation:no_comma": [1.0, 0.0, ...], ...}``."""
    out: dict[str, list[float]] = {}
    prompts = prompts if prompts is not None else [None] * len(completions)
    for p, c, ids, kws in zip(prompts, completions, instruction_id_list, kwargs, strict=True):
        for iid, v in zip(ids, verdicts(ids, kws, completion_text(c), prompt_text(p), loose)):
            out.setdefault(iid, []).append(float(v))
    return out


def ifeval_metrics(
    instruction_id_list: Sequence[Sequence[str]],
    kwargs: Sequence[Sequence[dict[str, Any] | None]],
    responses: Sequence[str],
    prompts: Sequence[str | None] | None = None,
) -> dict[str, float]:
    """IFEval's four accuracies over a set of responses (as lm-eval reports them):
    ``prompt_level_strict_acc``, ``inst_level_strict_acc``, ``prompt_level_loose_acc``,
    ``inst_level_loose_acc``."""
    prompts = prompts if prompts is not None else [None] * len(responses)
    out: dict[str, float] = {}
    for mode, loose in (("strict", False), ("loose", True)):
        rows = zip(instruction_id_list, kwargs, responses, prompts, strict=True)
        per_prompt = [verdicts(i, k, r, p, loose) for i, k, r, p in rows]
        flat = [v for vs in per_prompt for v in vs]
        out[f"prompt_level_{mode}_acc"] = sum(all(vs) for vs in per_prompt) / max(len(per_prompt), 1)
        out[f"inst_level_{mode}_acc"] = sum(flat) / max(len(flat), 1)
    return out
