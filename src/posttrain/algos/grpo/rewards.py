"""Reward functions from `algo.rewards`, wrapped so a failing reward stops training with a clear message."""

from __future__ import annotations

import functools
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from posttrain.config.validate import ConfigError
from posttrain.errors import TrainingError


def _guard(fn: Callable) -> Callable:
    name = getattr(fn, "__name__", "reward")

    @functools.wraps(fn)
    def guarded(prompts, completions, **kwargs):
        try:
            out = fn(prompts, completions, **kwargs)
        except Exception as ex:  # a reward bug must not look like a training signal
            raise TrainingError(f"reward {name!r} raised {type(ex).__name__}: {ex}") from ex
        if out is None or len(out) != len(completions):
            got = "None" if out is None else len(out)
            raise TrainingError(f"reward {name!r} returned {got} values for {len(completions)} completions")
        return out

    guarded.value_range = getattr(fn, "value_range", None)  # type: ignore[attr-defined]  # what histograms bin over
    return guarded


def reward_functions(cfg: DictConfig) -> tuple[list[Callable], list[float]]:
    """The task's reward functions (`algo.rewards`, which each GRPO task in conf/data/ sets) and their weights."""
    from posttrain.rewards import build

    specs = OmegaConf.to_container(cfg.algo.rewards, resolve=True)
    if not specs:
        raise ConfigError(f"data={cfg.data.name} sets no GRPO rewards: give algo.rewards=[{{name: ..., weight: ...}}]")
    try:
        funcs, weights = build(specs)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as ex:
        raise ConfigError(f"algo.rewards: {ex.args[0] if ex.args else ex}") from None
    return [_guard(f) for f in funcs], weights
