"""Format rewards: harmony final channel and ``<think>`` tags; plus ``final_text``.

Both score a completion 1.0 when well formed, else 0.0. A completion is either

* text with the markup in it (for harmony: decoded *with* special tokens; TRL decodes string
  completions with ``skip_special_tokens=True``, which deletes the harmony markers, so for
  GPT-OSS use conversational prompts), or
* a conversational assistant message as TRL's response parsing returns it (transformers >= 5
  ``parse_response``): GPT-OSS gives ``{"thinking": analysis, "content": final}``, Qwen-style
  templates ``{"reasoning_content": ..., "content": ...}``. There the parser has already
  matched the markup: harmony is well formed when ``content`` (the final channel) is non-empty
  and free of harmony tokens; think is well formed when both reasoning and content are
  non-empty. A message whose ``content`` still holds raw markup is checked as text.

* ``harmony_format``: exactly one ``<|channel|>final<|message|>`` with non-empty content,
  and nothing after that message but its terminator (``<|return|>`` or ``<|end|>``),
  optionally preceded by other channels (analysis, commentary).
* ``think_format``: exactly one ``<think>...</think>`` block with non-empty reasoning at the
  start, followed by a non-empty answer. ``require_open_tag=False`` accepts completions
  without the opening tag (chat templates that put ``<think>`` in the prompt).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from posttrain.rewards.text import completion_text

__all__ = [
    "final_text",
    "harmony_format",
    "is_harmony_formatted",
    "is_numeric_answer",
    "is_think_formatted",
    "numeric_answer",
    "think_format",
]

HARMONY_FINAL = "<|channel|>final<|message|>"
_HARMONY_STOPS = ("<|return|>", "<|end|>", "<|call|>")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def final_text(text: str) -> str:
    """The answer part: the last harmony final-channel message, else the text after the last
    ``</think>``, else the whole text."""
    if HARMONY_FINAL in text:
        tail = text.rsplit(HARMONY_FINAL, 1)[1]
        for stop in _HARMONY_STOPS:
            tail = tail.split(stop, 1)[0]
        return tail
    if _THINK_CLOSE in text:
        return text.rsplit(_THINK_CLOSE, 1)[1]
    return text


def is_harmony_formatted(text: str) -> bool:
    if text.count(HARMONY_FINAL) != 1:
        return False
    tail = text.split(HARMONY_FINAL, 1)[1]
    m = re.match(r"(.*?)(<\|return\|>|<\|end\|>)?\s*$", tail, flags=re.DOTALL)
    content = m.group(1) if m else ""
    if "<|" in content:  # another harmony token inside / after the final message
        return False
    return bool(content.strip())


def is_think_formatted(text: str, require_open_tag: bool = True) -> bool:
    if text.count(_THINK_CLOSE) != 1 or text.count(_THINK_OPEN) > 1:
        return False
    head, answer = text.split(_THINK_CLOSE, 1)
    stripped = head.lstrip()
    if stripped.startswith(_THINK_OPEN):
        reasoning = stripped[len(_THINK_OPEN) :]
    elif require_open_tag or _THINK_OPEN in head:
        return False
    else:
        reasoning = head
    return bool(reasoning.strip()) and bool(answer.strip())


def _parsed_message(completion) -> dict | None:
    """The assistant message of a conversational completion, if it is not raw markup."""
    if isinstance(completion, str) or not completion:
        return None
    msg = completion[-1]
    if not isinstance(msg, dict):
        return None
    content = msg.get("content") or ""
    if not isinstance(content, str) or HARMONY_FINAL in content or _THINK_CLOSE in content:
        return None
    return msg


def _harmony_ok(completion) -> bool:
    msg = _parsed_message(completion)
    if msg is None:
        return is_harmony_formatted(completion_text(completion))
    content = msg.get("content") or ""
    return bool(content.strip()) and "<|" not in content


def _think_ok(completion, require_open_tag: bool) -> bool:
    msg = _parsed_message(completion)
    if msg is None or not any(k in msg for k in ("reasoning_content", "thinking")):
        return is_think_formatted(completion_text(completion), require_open_tag)
    reasoning = msg.get("reasoning_content") or msg.get("thinking") or ""
    return bool(reasoning.strip()) and bool((msg.get("content") or "").strip())


def harmony_format(prompts: Sequence[Any] | None, completions: Sequence[Any], **columns: Any) -> list[float]:
    """TRL reward: 1.0 when the completion ends in one well-formed harmony final-channel message."""
    return [float(_harmony_ok(c)) for c in completions]


def think_format(
    prompts: Sequence[Any] | None, completions: Sequence[Any], *, require_open_tag: bool = True, **columns: Any
) -> list[float]:
    """TRL reward: 1.0 for ``<think>reasoning</think>answer``."""
    return [float(_think_ok(c, require_open_tag)) for c in completions]


_NUMBER = re.compile(r"^\s*(\\boxed\{\s*)?-?\d+(?:\.\d+)?(?(1)\s*\})\s*$")


def is_numeric_answer(text: str) -> bool:
    """The answer part is one number (optionally in ``\\boxed{}``) and nothing else."""
    return bool(_NUMBER.match(final_text(text)))


def numeric_answer(prompts: Sequence[Any] | None, completions: Sequence[Any], **columns: Any) -> list[float]:
    """1.0 when the answer is a bare number (a format reward for math tasks; says nothing of correctness)."""
    return [float(is_numeric_answer(completion_text(c))) for c in completions]
