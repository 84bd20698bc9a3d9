"""Verifiable rewards for GRPO, each usable directly as a TRL reward function.

Every reward is a pure function of the decoded completion text after stop truncation
(plus the row's dataset columns), with TRL's signature
``f(prompts, completions, **columns) -> list[float]``; completions may be strings or
conversational message lists. Registry names (``REWARDS``):

===================  =====================================================  ===================
name                 score                                                  needs column(s)
===================  =====================================================  ===================
``ifeval_strict``    fraction of IFEval instructions followed (strict)      instruction_id_list, kwargs
``ifeval_loose``     same, IFEval loose variants                            instruction_id_list, kwargs
``math``             1/0 answer correct via math-verify                     answer
``digit_match``      fraction of the integer answer's digits right          answer
``harmony_format``   1/0 one well-formed harmony final-channel message      -
``think_format``     1/0 ``<think>reasoning</think>answer``                 -
``numeric_answer``   1/0 the answer is one bare (or boxed) number           -
``length_to_cap``    ``min(len, cap)/cap`` (tokens or chars)                -
===================  =====================================================  ===================

``build(specs)`` turns config entries ``{name, weight, kwargs}`` into the
``reward_funcs`` and ``reward_weights`` GRPOTrainer/GRPOConfig take.

``RANGES`` holds the values each registered reward can take (all built-ins score in [0, 1]); a built
reward carries its range as ``value_range`` (None when not declared), which the GRPO reward histograms bin over.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.rewards.format import harmony_format, numeric_answer, think_format
from posttrain.rewards.ifeval import ifeval_loose, ifeval_strict
from posttrain.rewards.length import length_to_cap
from posttrain.rewards.math import digit_match_reward, math_reward

__all__ = ["RANGES", "REWARDS", "BoundReward", "RewardFunc", "build", "get", "register", "weighted_sum"]

RewardFunc = Callable[..., list[float]]

REWARDS: dict[str, RewardFunc] = {
    "ifeval_strict": ifeval_strict,
    "ifeval_loose": ifeval_loose,
    "math": math_reward,
    "digit_match": digit_match_reward,
    "harmony_format": harmony_format,
    "think_format": think_format,
    "numeric_answer": numeric_answer,
    "length_to_cap": length_to_cap,
}

# [lowest, highest] value of each registered reward
RANGES: dict[str, tuple[float, float]] = {name: (0.0, 1.0) for name in REWARDS}

_TRL_ARGS = {"prompts", "completions", "completion_ids"}


def register(name: str, fn: RewardFunc | None = None, *, value_range: tuple[float, float] | None = None):
    """Add a reward to the registry (usable as a decorator), with the [lowest, highest] value it can return."""

    def deco(f: RewardFunc) -> RewardFunc:
        if name in REWARDS and REWARDS[name] is not f:
            raise ValueError(f"reward {name!r} already registered")
        REWARDS[name] = f
        if value_range is not None:
            lo, hi = (float(x) for x in value_range)
            if not lo <= hi:
                raise ValueError(f"reward {name!r}: value_range {value_range} is not [lowest, highest]")
            RANGES[name] = (lo, hi)
        return f

    return deco(fn) if fn is not None else deco


def get(name: str) -> RewardFunc:
    try:
        return REWARDS[name]
    except KeyError:
        raise KeyError(f"unknown reward {name!r}; registered: {sorted(REWARDS)}") from None


def _options(fn: RewardFunc) -> set[str]:
    """Keyword options a reward takes (its named parameters other than TRL's own)."""
    ps = inspect.signature(fn).parameters.values()
    return {p.name for p in ps if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - _TRL_ARGS


class BoundReward:
    """A registered reward with its config options bound; named for TRL's logs, picklable."""

    def __init__(
        self, fn: RewardFunc, kwargs: Mapping[str, Any], name: str, value_range: tuple[float, float] | None = None
    ):
        self.fn, self.kwargs = fn, dict(kwargs)
        self.value_range = value_range
        self.__name__ = self.__qualname__ = name  # TRL logs rewards/<__name__>
        self.__doc__ = fn.__doc__

    def __call__(self, prompts, completions, **columns) -> list[float]:
        return self.fn(prompts, completions, **{**columns, **self.kwargs})

    def __repr__(self) -> str:
        return f"BoundReward({self.__name__!r}, {self.fn.__name__}, {self.kwargs})"


def _bind(name: str, fn: RewardFunc, kwargs: Mapping[str, Any], alias: str) -> BoundReward:
    unknown = set(kwargs) - _options(fn)
    if unknown:
        raise TypeError(f"reward {name!r}: unknown kwargs {sorted(unknown)}; it takes {sorted(_options(fn))}")
    return BoundReward(fn, kwargs, alias, RANGES.get(name))


def build(specs: Sequence[Mapping[str, Any]]) -> tuple[list[RewardFunc], list[float]]:
    """Reward functions and weights from config entries.

    Each entry: ``{"name": <registry name>, "weight": float = 1.0, "kwargs": {...} = {},
    "alias": str = name}`` (OmegaConf nodes work too). Unknown names or options fail here,
    before any model loads. Aliases (default: the name) must be unique: they are the names
    TRL logs each reward under.
    """
    funcs: list[RewardFunc] = []
    weights: list[float] = []
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        spec = dict(spec)
        extra = set(spec) - {"name", "weight", "kwargs", "alias"}
        if "name" not in spec or extra:
            raise ValueError(f"reward spec #{i} {spec}: needs 'name', may have 'weight', 'kwargs', 'alias'")
        name = spec["name"]
        alias = spec.get("alias") or name
        if alias in seen:
            raise ValueError(f"reward alias {alias!r} used twice; give one an 'alias'")
        seen.add(alias)
        kwargs = dict(spec.get("kwargs") or {})
        funcs.append(_bind(name, get(name), kwargs, alias))
        weights.append(float(spec.get("weight", 1.0)))
    if not funcs:
        raise ValueError("no reward specs given")
    return funcs, weights


def weighted_sum(funcs: Sequence[RewardFunc], weights: Sequence[float]) -> RewardFunc:
    """One reward that is ``sum_i w_i f_i`` (what GRPOTrainer computes from reward_weights)."""
    if len(funcs) != len(weights):
        raise ValueError(f"{len(funcs)} rewards but {len(weights)} weights")

    def combined(prompts, completions, **columns):
        total = [0.0] * len(completions)
        for f, w in zip(funcs, weights):
            for j, r in enumerate(f(prompts, completions, **columns)):
                total[j] += w * r
        return total

    combined.__name__ = "weighted_sum"
    return combined
