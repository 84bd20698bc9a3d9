"""One check for every number of every config group: nan and inf are refused at compose time.

The composed config holds each group merged with its structured schema, so a float field (`trainer.lr`,
`algo.trl.beta`, `algo.kl.target`, ...) already carries Python's float; OmegaConf and Hydra's override grammar accept
`inf`, `-inf` and `nan` for it. Walking the whole tree also covers the free-form parts (`model.arch`,
`data.params`, reward weights and kwargs), so a new schema field needs no rule of its own.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posttrain.errors import ConfigError


def non_finite(cfg: DictConfig) -> list[tuple[str, float]]:
    """(dotted key, value) of every nan/inf number in `cfg`, in config order (interpolations unresolved)."""
    found: list[tuple[str, float]] = []

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, float) and not math.isfinite(node):
            found.append((key, node))

    walk(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False), "")
    return found


def check_finite(cfg: DictConfig) -> None:
    """ConfigError naming the first key whose number is nan or inf."""
    bad = non_finite(cfg)
    if bad:
        key, value = bad[0]
        raise ConfigError(f"{key}={value} must be a finite number")
