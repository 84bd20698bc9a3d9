"""The shared column schema of RLVR datasets, so generated and loaded sets concatenate.

* IFEval-style rows: ``prompt``, ``instruction_id_list`` (list of str) and ``kwargs`` (list
  of structs with every IFEval kwarg name, ``None`` where an instruction does not use it,
  exactly like ``google/IFEval``; plus ``options`` for RLVR-IFeval's custom choices).
* Math rows: ``prompt`` and ``answer`` (str, parsed by math-verify in the reward).

``prompt`` is a user conversation (list of ``{"role", "content"}``) when ``chat=True``
(TRL applies the tokenizer's chat template), else a plain string.
"""

from __future__ import annotations

from typing import Any

from datasets import Features, List, Value

__all__ = ["KWARGS_FEATURE", "as_prompt", "ifeval_features", "math_features", "normalize_kwargs"]

_INT_KEYS = (
    "num_highlights",
    "num_words",
    "num_placeholders",
    "num_paragraphs",
    "frequency",
    "num_sentences",
    "num_sections",
    "nth_paragraph",
    "let_frequency",
    "capital_frequency",
    "num_bullets",
)
_STR_KEYS = (
    "relation",
    "prompt_to_repeat",
    "postscript_marker",
    "first_word",
    "keyword",
    "section_spliter",
    "capital_relation",
    "end_phrase",
    "letter",
    "let_relation",
    "language",
)
_LIST_KEYS = ("forbidden_words", "keywords", "options")

KWARGS_FEATURE = {
    **{k: Value("int64") for k in _INT_KEYS},
    **{k: Value("string") for k in _STR_KEYS},
    **{k: List(Value("string")) for k in _LIST_KEYS},
}
_MESSAGES = List({"role": Value("string"), "content": Value("string")})


def ifeval_features(chat: bool) -> Features:
    return Features(
        {
            "key": Value("int64"),
            "prompt": _MESSAGES if chat else Value("string"),
            "instruction_id_list": List(Value("string")),
            "kwargs": List(KWARGS_FEATURE),
        }
    )


def math_features(chat: bool) -> Features:
    return Features({"prompt": _MESSAGES if chat else Value("string"), "answer": Value("string")})


def as_prompt(text: str, chat: bool) -> Any:
    return [{"role": "user", "content": text}] if chat else text


def normalize_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Every schema key present (``None`` when unused); unknown keys are an error."""
    kwargs = {k: v for k, v in (kwargs or {}).items() if v is not None}
    unknown = set(kwargs) - set(KWARGS_FEATURE)
    if unknown:
        raise ValueError(f"kwargs {sorted(unknown)} are not IFEval kwargs names")
    out = {k: kwargs.get(k) for k in KWARGS_FEATURE}
    for k in _INT_KEYS:
        if out[k] is not None:
            out[k] = int(out[k])  # type: ignore[arg-type]  # checked not None above
    return out
