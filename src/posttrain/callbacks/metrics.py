"""`metrics.jsonl`: one JSON object per logged step, written for every run whatever the logger; evaluations during
training (HF's `eval_*` logs) go to `eval_metrics.jsonl` beside it, one object per log.

On resume both files are cut back to the checkpoint's step, so the steps that are re-run are not logged twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else value
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary_stats(metrics: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    """`final_<key>`, `<key>_first5_mean` and `<key>_last5_mean` of each key over the logged steps that have it."""
    out: dict[str, float] = {}
    for key in keys:
        vals = [m[key] for m in metrics if m.get(key) is not None]
        if vals:
            out[f"final_{key}"] = vals[-1]
            out[f"{key}_first5_mean"] = sum(vals[:5]) / len(vals[:5])
            out[f"{key}_last5_mean"] = sum(vals[-5:]) / len(vals[-5:])
    return out


class JsonlMetricsCallback(TrainerCallback):
    """Append each `on_log` record to `<run_dir>/metrics.jsonl` (train logs) or `eval_metrics.jsonl` (eval logs)."""

    def __init__(self, path: str | Path, extra: dict[str, Any] | None = None):
        self.path = Path(path)
        self.eval_path = self.path.with_name("eval_metrics.jsonl")
        self.extra = extra or {}

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.path, self.eval_path):
            if path.is_file() or path == self.path:
                kept = [r for r in read_metrics(path) if r.get("step", 0) <= state.global_step]
                path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        if any(k.startswith("eval_") for k in logs):
            with self.eval_path.open("a") as fh:
                fh.write(json.dumps({"step": state.global_step, **{k: _clean(v) for k, v in logs.items()}}) + "\n")
            return
        record = {"step": state.global_step, **{k: _clean(v) for k, v in logs.items()}}
        record.update(self.extra)
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
