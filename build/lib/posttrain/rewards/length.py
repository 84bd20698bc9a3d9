"""Length-to-cap reward: ``min(len, cap) / cap`` (the toy probe: it must rise, then saturate).

``unit="tokens"`` counts completion tokens from TRL's ``completion_ids`` argument (the
generated ids after stop truncation, the same ids the loss sees), ``unit="chars"`` counts
characters of the decoded completion text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posttrain.rewards.text import completion_text

__all__ = ["length_to_cap"]


def length_to_cap(
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    *,
    cap: int = 64,
    unit: str = "tokens",
    completion_ids: Sequence[Sequence[int]] | None = None,
    **columns: Any,
) -> list[float]:
    """TRL reward: ``min(len, cap) / cap`` per completion, len in ``unit`` ("tokens" or "chars")."""
    if cap <= 0:
        raise ValueError(f"cap must be positive, got {cap}")
    if unit == "tokens":
        if completion_ids is None:
            raise ValueError("length_to_cap(unit='tokens') needs completion_ids (TRL passes them); use unit='chars'")
        lengths = [len(ids) for ids in completion_ids]
    elif unit == "chars":
        lengths = [len(completion_text(c)) for c in completions]
    else:
        raise ValueError(f"unit must be 'tokens' or 'chars', got {unit!r}")
    return [min(n, cap) / cap for n in lengths]
