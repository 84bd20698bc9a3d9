"""Tokenize conversations with the chat template's `{% generation %}` tags: labels only on assistant tokens."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from posttrain.errors import DataError

IGNORE_INDEX = -100


def assistant_labels(tokenizer: Any, messages: Sequence[dict], max_length: int | None = None) -> dict[str, list[int]]:
    """`input_ids`, `attention_mask` and `labels` (-100 everywhere but the assistant's own tokens)."""
    if not has_generation_tags(tokenizer):
        raise DataError(
            "the chat template has no {% generation %} tags: no token can be marked as the assistant's, so every "
            "label would be masked (use a template from chat_templates/)"
        )
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if max_length is not None:
        ids, mask = ids[:max_length], mask[:max_length]
    labels = [t if m else IGNORE_INDEX for t, m in zip(ids, mask)]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}


def has_generation_tags(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template marks assistant turns with `{% generation %}` (needed for masks)."""
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default", "")
    return bool(re.search(r"\{%-?\s*generation\s*-?%\}", template or ""))


def check_labels(labels: torch.Tensor, where: str = "batch") -> None:
    """All labels masked would give a NaN (0/0) loss: fail with the reason instead."""
    if not bool((labels != IGNORE_INDEX).any()):
        raise DataError(
            f"{where}: every label is masked (no assistant tokens) — does the chat template have "
            "{% generation %} tags, and does truncation keep the answer?"
        )
