"""Deliberately broken reward functions for the reliability cases (registered on import).

`sitecustomize.py` next to this file imports it, so `PYTHONPATH=experiments/reliability/plugin python train.py ...`
can name them in `algo.rewards`: the way a researcher's own reward plugin would be loaded.
"""

from __future__ import annotations

from posttrain.rewards import REWARDS, register


def raising_reward(prompts, completions, **kwargs) -> list[float]:
    """A reward with a bug: raises on every call."""
    raise ValueError("cannot parse completion")


def short_reward(prompts, completions, **kwargs) -> list[float]:
    """A reward that drops the last completion's score."""
    return [0.0] * (len(completions) - 1)


for _name, _fn in (("test_raising", raising_reward), ("test_short", short_reward)):
    if _name not in REWARDS:
        register(_name, _fn)
