"""Loaders for the real RLVR sets, mapped to the generators' schema (``schema.py``).

Each loader takes ``name_or_path``: an existing local file (``.jsonl``/``.json``/``.parquet``)
or directory of them is read with ``datasets.load_dataset("json"|"parquet", data_files=...)``;
anything else is a hub name passed to ``datasets.load_dataset(name, ...)`` (needs a machine
that reaches the hub). The local file must be in the hub set's own schema.

* ``load_gsm8k``: ``openai/gsm8k`` (config ``main``): ``question`` -> ``prompt``, the number
  after ``#### `` in ``answer`` -> ``answer`` (thousands separators removed).
* ``load_ifeval``: ``google/IFEval``: ``prompt``, ``instruction_id_list``, ``kwargs`` as is.
* ``load_rlvr_ifeval``: ``allenai/RLVR-IFeval``: last user message of ``messages`` ->
  ``prompt``, the JSON ``ground_truth`` (open-instruct ``func_name`` + params) -> one IFEval
  instruction id and kwargs (``RLVR_TO_IFEVAL``). Exact counts become relation
  ``"exactly"``; ``at most``/``around`` keep their meaning (see ``ifeval_checks.compare``).
* ``load_rlvr(name_or_path)`` dispatches on the name.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from datasets import Dataset, load_dataset

from posttrain.data.jsonl import check_data_file
from posttrain.data.rlvr.schema import as_prompt, ifeval_features, math_features, normalize_kwargs

__all__ = [
    "load_gsm8k",
    "load_ifeval",
    "load_rlvr",
    "load_rlvr_ifeval",
    "parse_gsm8k_answer",
    "rlvr_ground_truth_to_ifeval",
]

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def _load_raw(name_or_path: str, split: str, config: str | None = None) -> Dataset:
    path = Path(name_or_path)
    if path.exists():
        files = sorted(p for p in path.iterdir() if p.suffix in _FORMATS) if path.is_dir() else [path]
        if not files or any(p.suffix not in _FORMATS for p in files):
            raise ValueError(f"{name_or_path}: expected .jsonl/.json/.parquet files, found {[p.name for p in files]}")
        kinds = {_FORMATS[p.suffix] for p in files}
        if len(kinds) > 1:
            raise ValueError(f"{name_or_path}: mixed file formats {sorted(kinds)}")
        check_data_file(path)  # UTF-8 and well-formed rows, named by file:line (datasets' errors are tracebacks)
        return load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")
    if name_or_path.startswith((".", "/", "~")) or Path(name_or_path).suffix in _FORMATS:
        raise FileNotFoundError(f"no such file or directory: {name_or_path}")
    return load_dataset(name_or_path, config, split=split) if config else load_dataset(name_or_path, split=split)


def _require(ds: Dataset, columns: set[str], what: str) -> None:
    missing = columns - set(ds.column_names)
    if missing:
        raise ValueError(f"{what}: missing columns {sorted(missing)}; has {ds.column_names}")


# --- GSM8K ----------------------------------------------------------------------------
def parse_gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the number after ``####`` (commas removed)."""
    m = re.search(r"####\s*(.+?)\s*$", solution.strip())
    if not m:
        raise ValueError(f"GSM8K solution without '#### <answer>': {solution[-80:]!r}")
    return m.group(1).replace(",", "").replace("$", "").strip()


def load_gsm8k(
    name_or_path: str = "openai/gsm8k", split: str = "train", chat: bool = True, suffix: str = ""
) -> Dataset:
    """GSM8K as ``prompt``/``answer`` rows (hub config ``main``)."""
    raw = _load_raw(name_or_path, split, config="main")
    _require(raw, {"question", "answer"}, "gsm8k")
    return raw.map(
        lambda r: {"prompt": as_prompt(r["question"] + suffix, chat), "answer": parse_gsm8k_answer(r["answer"])},
        remove_columns=raw.column_names,
        features=math_features(chat),
    )


# --- IFEval ---------------------------------------------------------------------------
def _ifeval_rows(keys, prompts, ids, kwargs, chat: bool) -> Dataset:
    rows = {
        "key": [int(k) for k in keys],
        "prompt": [as_prompt(p, chat) for p in prompts],
        "instruction_id_list": [list(i) for i in ids],
        "kwargs": [[normalize_kwargs(k) for k in kws] for kws in kwargs],
    }
    return Dataset.from_dict(rows, features=ifeval_features(chat))


def load_ifeval(name_or_path: str = "google/IFEval", split: str = "train", chat: bool = True) -> Dataset:
    """google/IFEval rows (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``)."""
    raw = _load_raw(name_or_path, split)
    _require(raw, {"prompt", "instruction_id_list", "kwargs"}, "IFEval")
    keys = raw["key"] if "key" in raw.column_names else range(len(raw))
    return _ifeval_rows(keys, raw["prompt"], raw["instruction_id_list"], raw["kwargs"], chat)


#: open-instruct / RLVR-IFeval function name -> (IFEval id, {their param: IFEval kwarg})
RLVR_TO_IFEVAL: dict[str, tuple[str, dict[str, str]]] = {
    "verify_keywords": ("keywords:existence", {"keyword_list": "keywords"}),
    "verify_keyword_frequency": ("keywords:frequency", {"word": "keyword", "N": "frequency"}),
    "validate_forbidden_words": ("keywords:forbidden_words", {"forbidden_words": "forbidden_words"}),
    "verify_letter_frequency": ("keywords:letter_frequency", {"letter": "letter", "N": "let_frequency"}),
    "validate_response_language": ("language:response_language", {"language": "language"}),
    "verify_paragraph_count": ("length_constraints:number_paragraphs", {"N": "num_paragraphs"}),
    "validate_word_constraint": ("length_constraints:number_words", {"N": "num_words", "quantifier": "relation"}),
    "verify_sentence_constraint": (
        "length_constraints:number_sentences",
        {"N": "num_sentences", "quantifier": "relation"},
    ),
    "validate_paragraphs": (
        "length_constraints:nth_paragraph_first_word",
        {"N": "num_paragraphs", "i": "nth_paragraph", "first_word": "first_word"},
    ),
    "verify_postscript": ("detectable_content:postscript", {"postscript_marker": "postscript_marker"}),
    "validate_placeholders": ("detectable_content:number_placeholders", {"N": "num_placeholders"}),
    "verify_bullet_points": ("detectable_format:number_bullet_lists", {"N": "num_bullets"}),
    "validate_title": ("detectable_format:title", {}),
    "validate_choice": ("detectable_format:constrained_response", {"options": "options"}),
    "validate_highlighted_sections": ("detectable_format:number_highlighted_sections", {"N": "num_highlights"}),
    "validate_sections": (
        "detectable_format:multiple_sections",
        {"N": "num_sections", "section_splitter": "section_spliter"},
    ),
    "validate_json_format": ("detectable_format:json_format", {}),
    "validate_repeat_prompt": ("combination:repeat_prompt", {"original_prompt": "prompt_to_repeat"}),
    "validate_two_responses": ("combination:two_responses", {}),
    "validate_uppercase": ("change_case:english_capital", {}),
    "validate_lowercase": ("change_case:english_lowercase", {}),
    "validate_frequency_capital_words": (
        "change_case:capital_word_frequency",
        {"N": "capital_frequency", "quantifier": "capital_relation"},
    ),
    "validate_end": ("startend:end_checker", {"end_phrase": "end_phrase"}),
    "validate_quotation": ("startend:quotation", {}),
    "validate_no_commas": ("punctuation:no_comma", {}),
}
_EXACT_RELATION = {"verify_keyword_frequency": "relation", "verify_letter_frequency": "let_relation"}


def rlvr_ground_truth_to_ifeval(ground_truth: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One RLVR-IFeval ``ground_truth`` (JSON or Python-literal string, or dict) -> (id, kwargs)."""
    gt = ground_truth
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except json.JSONDecodeError:
            gt = ast.literal_eval(gt)
    if isinstance(gt, list):
        if len(gt) != 1:
            raise ValueError(f"expected one constraint per row, got {len(gt)}")
        gt = gt[0]
    func = gt.get("func_name")
    if func not in RLVR_TO_IFEVAL:
        raise ValueError(f"unknown RLVR-IFeval func_name {func!r}")
    iid, names = RLVR_TO_IFEVAL[func]
    kwargs = {ours: gt[theirs] for theirs, ours in names.items() if gt.get(theirs) is not None}
    if func in _EXACT_RELATION:
        kwargs[_EXACT_RELATION[func]] = "exactly"
    if iid == "combination:repeat_prompt" and "prompt_to_repeat" not in kwargs:
        raise ValueError(f"{func} without original_prompt")
    return iid, kwargs


def load_rlvr_ifeval(name_or_path: str = "allenai/RLVR-IFeval", split: str = "train", chat: bool = True) -> Dataset:
    """allenai/RLVR-IFeval rows mapped to ``prompt``/``instruction_id_list``/``kwargs``."""
    raw = _load_raw(name_or_path, split)
    _require(raw, {"messages", "ground_truth"}, "RLVR-IFeval")
    prompts, ids, kwargs = [], [], []
    for messages, gt in zip(raw["messages"], raw["ground_truth"]):
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users:
            raise ValueError(f"RLVR-IFeval row without a user message: {messages}")
        iid, kw = rlvr_ground_truth_to_ifeval(gt)
        prompts.append(users[-1])
        ids.append([iid])
        kwargs.append([kw])
    return _ifeval_rows(range(len(prompts)), prompts, ids, kwargs, chat)


def load_rlvr(name_or_path: str, split: str = "train", chat: bool = True) -> Dataset:
    """Dispatch on the name: gsm8k, RLVR-IFeval or IFEval (local paths: by file name)."""
    name = Path(name_or_path).name.lower() if Path(name_or_path).exists() else name_or_path.lower()
    if "gsm8k" in name:
        return load_gsm8k(name_or_path, split, chat)
    if "rlvr" in name:
        return load_rlvr_ifeval(name_or_path, split, chat)
    if "ifeval" in name:
        return load_ifeval(name_or_path, split, chat)
    raise ValueError(f"don't know which RLVR set {name_or_path!r} is (expected gsm8k, IFEval or RLVR-IFeval)")
