"""Analysis over run directories: `load_runs(path)` (metrics per step, overrides as columns) and plots.

from posttrain.analysis import load_runs, load_summaries, plot_curves, save_figure
df = load_runs("multirun/2026-11-21/12-00-00")
save_figure(plot_curves(df, ["reward", "kl"]), "figures/reward_kl.png")
"""

from posttrain.analysis.runs import (
    config_values,
    find_runs,
    label,
    load_optuna,
    load_runs,
    load_summaries,
    parse_override,
    read_summary,
    run_overrides,
)

__all__ = [
    "config_values",
    "find_runs",
    "label",
    "load_optuna",
    "load_runs",
    "load_summaries",
    "parse_override",
    "plot_bars",
    "plot_curves",
    "plot_objective",
    "read_summary",
    "run_overrides",
    "save_figure",
    "smooth",
]


def __getattr__(name: str):  # plotting pulls in matplotlib only when asked for
    if name in ("plot_bars", "plot_curves", "plot_objective", "save_figure", "smooth"):
        from posttrain.analysis import plots

        return getattr(plots, name)
    raise AttributeError(name)
