"""Plotting helpers over `load_runs` / `load_summaries` frames (matplotlib; without a display it draws with Agg).

fig = plot_curves(df, ["reward", "kl"])          # one panel per metric, one line per sweep member
fig = plot_objective(load_summaries(path), "algo.trl.beta", hue="seed")
save_figure(fig, "figures/reward_kl.png")
write_run_plots(run_dir, {"reward.png": ("reward", "kl")})   # what a training run leaves in <run>/plots/
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from posttrain.analysis.runs import label, load_runs

_STYLES = ("-", "--", "-.", ":")


def _by(df: pd.DataFrame, by: Sequence[str] | None) -> list[str]:
    return list(by) if by is not None else list(df.attrs.get("swept", []))


def smooth(values: pd.Series, window: int) -> pd.Series:
    """Trailing moving average over `window` logged steps (1: unchanged)."""
    return values.rolling(window, min_periods=1).mean() if window > 1 else values


def plot_curves(
    df: pd.DataFrame,
    metrics: str | Iterable[str] = ("reward", "kl"),
    by: Sequence[str] | None = None,
    window: int = 1,
    ncols: int = 2,
    legend: bool = True,
) -> plt.Figure:
    """One panel per metric, one line per run, labelled by the swept overrides (or `by`); `legend=False` for one run."""
    names = [metrics] if isinstance(metrics, str) else list(metrics)
    cols = _by(df, by)
    ncols = max(1, min(ncols, len(names)))
    nrows = -(-len(names) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 3.6 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, names):
        drawn = 0
        for _, run in df.groupby("run", sort=False):
            if metric not in run or run[metric].notna().sum() == 0:
                continue
            run = run.sort_values("step")
            style = _STYLES[drawn % len(_STYLES)]  # overlapping runs stay visible
            ax.plot(run["step"], smooth(run[metric], window), style, marker="o", ms=3, label=label(run.iloc[0], cols))
            drawn += 1
        ax.set_title(metric if drawn else f"{metric} (not logged)")
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if drawn and legend:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_objective(summaries: pd.DataFrame, x: str, y: str = "objective", hue: str | None = None) -> plt.Figure:
    """`y` (default the sweep objective) against one swept value, one line per `hue` value."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    groups = summaries.groupby(hue, sort=True) if hue else [(None, summaries)]
    for key, part in groups:
        part = part.sort_values(x)
        ax.plot(
            part[x].astype(str) if part[x].dtype == object else part[x],
            part[y],
            marker="o",
            label=f"{hue}={key}" if hue else None,
        )
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)
    if hue:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_bars(table: pd.DataFrame, x: str, ys: Sequence[str], title: str = "") -> plt.Figure:
    """Side-by-side bar panels of `ys` per `x` (e.g. seconds and peak MiB per kernel backend)."""
    fig, axes = plt.subplots(1, len(ys), figsize=(4.5 * len(ys), 3.4), squeeze=False)
    for ax, y in zip(axes.flat, ys):
        ax.bar(table[x].astype(str), table[y])
        ax.set_title(y)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_figure(fig: plt.Figure, path: str | Path, dpi: int = 110, tight: bool = True) -> Path:
    """Write `fig` as PNG (parents created) and close it; returns the path. `tight=False` keeps the figure size
    (figsize x dpi pixels) instead of cropping to the drawn content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return path


RUN_PLOT_DPI = 100  # plots/<file>.png of a run: 550 x 360 pixels per panel, panels side by side


def write_run_plots(run_dir: str | Path, plots: Mapping[str, Sequence[str]]) -> list[Path]:
    """`<run_dir>/plots/<file>` for each `{file: metrics}`: one panel per metric that metrics.jsonl logged, side by
    side (files whose metrics were never logged are skipped). Returns the paths written."""
    run_dir = Path(run_dir)
    df = load_runs(run_dir)
    written = []
    for name, metrics in plots.items():
        logged = [m for m in metrics if m in df and df[m].notna().any()]
        if logged:
            fig = plot_curves(df, logged, by=[], ncols=len(logged), legend=False)
            written.append(save_figure(fig, run_dir / "plots" / name, dpi=RUN_PLOT_DPI, tight=False))
    return written
