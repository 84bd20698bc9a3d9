"""The training terminal: one progress bar with the key numbers, a compact line per logging step, an end table.

transformers' ProgressCallback / PrinterCallback print every log record as a full dict over the bar; `use_console`
swaps them for `ConsoleCallback` (the full records still go to metrics.jsonl through `JsonlMetricsCallback`).
`finish_run` prints a short summary table and writes the curves into `<run_dir>/plots/`. Rank 0 alone prints.

Each algorithm declares what it shows as its `console` mapping (`posttrain.algos.base.Algorithm`; `ConsoleSpec.of`
reads it); `trend` also picks the first-5 / last-5 means that go into summary.json:

    console = {
        "show": {"reward": "reward", "kl": "kl", "step_time": "s/step"},   # metric -> label: bar postfix + line
        "trend": ("reward", "kl"),                                        # end table: first-5 / last-5 mean
        "plots": {"reward.png": ("reward", "kl", "completions/mean_length")},  # plots/<file>: one panel each
    }

    step  2/30  reward    0.5729  kl 0.0006029  s/step     1.607  [0:03]

A metric that is off for a run is logged as NaN (metrics.jsonl: null), e.g. GRPO's `kl` with `algo.trl.beta=0` (no
reference model); the terminal shows it as `off`.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

_VALUE_WIDTH = 9  # `.4g` of a float is at most 9 characters when positive ("0.0006029", "3.353e-08")
OFF = "off"  # a metric logged as NaN / null: not computed in this run


@dataclass(frozen=True)
class ConsoleSpec:
    """What the terminal and the end-of-run report show for one algorithm (see the module docstring)."""

    show: Mapping[str, str] = field(default_factory=lambda: {"loss": "loss"})
    trend: tuple[str, ...] = ("loss",)
    plots: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: {"loss.png": ("loss",)})
    # end table: column label -> a regex over summary.json keys whose group 1 names the row (at most two columns),
    # e.g. {"accuracy": r"^eval_(\w+)_accuracy$"}: one row per evaluation condition
    results: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, declared: Mapping[str, Any] | ConsoleSpec | None) -> ConsoleSpec:
        """An algorithm's `console` mapping (None or empty: loss only); an unknown field raises ValueError."""
        if not declared:
            return cls()
        if isinstance(declared, ConsoleSpec):
            return declared
        unknown = set(declared) - {"show", "trend", "plots", "results"}
        if unknown:
            raise ValueError(f"console has unknown fields {sorted(unknown)} (known: show, trend, plots, results)")
        spec = cls()
        results = dict(declared.get("results", {}))
        if len(results) > 2:
            raise ValueError(f"console results has {len(results)} columns; the end table has room for two")
        return cls(
            show=dict(declared.get("show", spec.show)),
            trend=tuple(declared.get("trend", spec.trend)),
            plots={name: tuple(keys) for name, keys in declared.get("plots", spec.plots).items()},
            results=results,
        )

    def label(self, key: str) -> str:
        return self.show.get(key, key)


def is_off(value: Any) -> bool:
    """A metric value that stands for "not computed": None (null in metrics.jsonl) or NaN."""
    return value is None or (isinstance(value, numbers.Real) and math.isnan(float(value)))


def fmt(value: Any, width: int = 0) -> str:
    """A number as the terminal shows it: `.4g` for floats, `off` for None/NaN, right-aligned to `width`."""
    if is_off(value):
        text = OFF
    elif isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):  # float, numpy float32, ...
        text = f"{float(value):.4g}"
    else:
        text = str(value)
    return text.rjust(width)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def duration(seconds: float) -> str:
    """`47.4 s`, `12 min 03 s`, `2 h 05 min`."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def is_train_record(logs: Mapping[str, Any]) -> bool:
    """A per-step training record (not an eval record, not the end-of-training runtime record)."""
    return bool(logs) and "train_runtime" not in logs and not any(k.startswith("eval_") for k in logs)


class ConsoleCallback(TrainerCallback):
    """One tqdm bar (postfix: the spec's `show` metrics) and a compact aligned line per training log record.

    With `trainer.progress_bar=false` (HF `disable_tqdm`) the lines are printed without a bar. Log records are
    read, never modified, so metrics.jsonl receives exactly what it did with HF's printers.
    """

    def __init__(self, spec: ConsoleSpec | Mapping[str, Any] | None = None, stream=None):
        self.spec = ConsoleSpec.of(spec)
        self.stream = stream  # lines go to stdout unless given; the bar goes to stderr as tqdm's do
        self.bar = None
        self._start = time.time()
        self._step = 0
        self._step_width = 1

    def _write(self, line: str) -> None:
        out = self.stream or sys.stdout
        if self.bar is not None:
            self.bar.write(line, file=out)
        else:
            print(line, file=out, flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._start = time.time()
        self._step = state.global_step
        self._step_width = len(str(state.max_steps))
        if not getattr(args, "disable_tqdm", False):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, dynamic_ncols=True, unit="step")

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None and state.is_world_process_zero:
            self.bar.update(state.global_step - self._step)
        self._step = state.global_step

    def line(self, step: int, max_steps: int, logs: Mapping[str, Any]) -> str:
        """`step  2/30  reward    0.5729  kl 0.0006029  [0:03]`: the spec's metrics present in `logs`, aligned."""
        fields = [f"step {str(step).rjust(self._step_width)}/{max_steps}"]
        fields += [f"{label} {fmt(logs[key], _VALUE_WIDTH)}" for key, label in self.spec.show.items() if key in logs]
        return "  ".join(fields) + f"  [{_clock(time.time() - self._start)}]"

    def postfix(self, logs: Mapping[str, Any]) -> str:
        return " ".join(f"{label}={fmt(logs[key])}" for key, label in self.spec.show.items() if key in logs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if is_train_record(logs):
            if self.bar is not None:
                self.bar.set_postfix_str(self.postfix(logs), refresh=True)
            self._write(self.line(state.global_step, state.max_steps, logs))
        elif any(k.startswith("eval_") for k in logs):
            shown = {k.removeprefix("eval_"): v for k, v in logs.items() if k.startswith("eval_")}
            keys = [k for k in self.spec.show if k in shown] or [k for k in ("loss",) if k in shown]
            if keys:  # (an evaluation's per-dataset logs may show nothing: their summary line follows)
                fields = [f"{self.spec.label(k)} {fmt(shown[k])}" for k in keys]
                self._write("  ".join([f"eval at step {state.global_step}", *fields]))

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def use_console(trainer: Any, spec: ConsoleSpec | Mapping[str, Any] | None = None) -> ConsoleCallback:
    """Replace transformers' progress/printer callbacks on `trainer` with a `ConsoleCallback(spec)`."""
    from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # NotebookProgressCallback inside a notebook

    printers = (ProgressCallback, PrinterCallback, DEFAULT_PROGRESS_CALLBACK)
    for cb in [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, printers)]:
        trainer.remove_callback(cb)
    console = ConsoleCallback(spec)
    trainer.add_callback(console)
    return console


def _first_last(values: Sequence[float], n: int = 5) -> tuple[float, float]:
    return sum(values[:n]) / len(values[:n]), sum(values[-n:]) / len(values[-n:])


def _results_rows(summary: Mapping[str, Any], results: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """The spec's result columns: one row per name the regexes find in summary.json, in first-seen order."""
    import re

    table: dict[str, dict[str, Any]] = {}
    for column, pattern in results.items():
        for key, value in summary.items():
            m = re.match(pattern, key)
            if m and isinstance(value, (int, float)) and not isinstance(value, bool):
                table.setdefault(m.group(1), {})[column] = value
    if not table:
        return []
    columns = list(results) + [""] * (2 - len(results))
    rows: list[tuple[str, str, str, str]] = [("", columns[0], columns[1], "")]
    for name, values in table.items():
        cells = [fmt(values[c]) if c in values else "-" for c in columns[:2]]
        rows.append((name, cells[0], cells[1] if columns[1] else "", ""))
    return rows


def summary_table(
    summary: Mapping[str, Any],
    metrics: Sequence[Mapping[str, Any]],
    spec: ConsoleSpec | Mapping[str, Any] | None = None,
) -> str:
    """The end-of-run table: first-5/last-5 means of the spec's `trend` metrics (over logged steps; `off` for one
    logged only as null/NaN), every `<name>_before`/`<name>_after` pair of summary.json (e.g. heldout_acc), the spec's
    `results` (e.g. D2L's accuracy per evaluation condition), and the runtime."""
    spec = ConsoleSpec.of(spec)
    rows: list[tuple[str, str, str, str]] = []
    trends: list[tuple[str, str, str, str]] = []
    for key in spec.trend:
        values = [m[key] for m in metrics if isinstance(m.get(key), (int, float)) and not is_off(m[key])]
        if values:
            first, last = (fmt(v) for v in _first_last(values))
            trends.append((spec.label(key), first, last, ""))
        elif any(key in m for m in metrics):
            trends.append((spec.label(key), OFF, OFF, ""))
    if trends:
        rows += [("", "first-5", "last-5", ""), *trends]
    pairs = [k.removesuffix("_before") for k in summary if k.endswith("_before")]
    pairs = [p for p in pairs if f"{p}_after" in summary]
    pairs = [p for p in pairs if all(isinstance(summary[f"{p}{s}"], (int, float)) for s in ("_before", "_after"))]
    if pairs:
        rows.append(("", "before", "after", ""))
        for p in pairs:
            before, after = summary[f"{p}_before"], summary[f"{p}_after"]
            rows.append((p, fmt(before), fmt(after), f"{after - before:+.4g}"))
    rows += _results_rows(summary, spec.results)
    runtime = summary.get("runtime_s")
    if isinstance(runtime, (int, float)) and math.isfinite(runtime):
        steps = summary.get("final_step")
        rows.append(("runtime", duration(runtime), f"{steps} steps" if steps is not None else "", ""))
    if not rows:
        return ""
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    w2 = max(len(r[2]) for r in rows)
    body = [f"  {a.ljust(w0)}  {b.rjust(w1)}  {c.rjust(w2)}  {d}".rstrip() for a, b, c, d in rows]
    title = f"summary ({summary['algo']})" if "algo" in summary else "summary"
    return "\n".join([title, *body])


def finish_run(
    run_dir: str | Path, summary: Mapping[str, Any], spec: ConsoleSpec | Mapping[str, Any] | None = None
) -> list[Path]:
    """Print the summary table and write the spec's plots into `<run_dir>/plots/` (rank 0 only); the plot paths."""
    from posttrain.callbacks.metrics import read_metrics
    from posttrain.dist import is_main_process

    if not is_main_process():
        return []
    spec = ConsoleSpec.of(spec)
    run_dir = Path(run_dir)
    table = summary_table(summary, read_metrics(run_dir / "metrics.jsonl"), spec)
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # a training process draws off-screen; a notebook keeps its backend
        matplotlib.use("Agg")
    from posttrain.analysis.plots import write_run_plots

    paths = write_run_plots(run_dir, spec.plots)
    if table:
        print(table + "".join(f"\n  plot: {p}" for p in paths), flush=True)
    return paths
