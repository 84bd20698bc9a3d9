"""Log the terms of a composite loss: per-micro-batch values averaged into the next `Trainer.log` record."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    from transformers import Trainer as _TrainerBase
else:
    _TrainerBase = object


class LossTermsMixin(_TrainerBase):
    """Mix into an HF `Trainer` subclass; call `record_terms(stats)` from `compute_loss`."""

    def record_terms(self, stats: dict[str, float]) -> None:
        if not hasattr(self, "_loss_terms"):
            self._loss_terms: dict[str, list[float]] = defaultdict(list)
        for key, value in stats.items():
            self._loss_terms[key].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        terms = getattr(self, "_loss_terms", None)
        if "loss" in logs and terms:
            for key, values in terms.items():
                logs[key] = sum(values) / len(values)
            terms.clear()
        super().log(logs, start_time)
