"""GRPO metrics kept on the device until logging.

TRL appends each micro-batch's metrics to `trainer._metrics[mode][name]` as floats, so every metric read in the
loss is a host sync between the forward and the backward. The kernel path appends 0-dim device tensors instead
(detached), and `resolve_metrics` turns every list into floats with one transfer just before TRL's `log()`
averages them: the GPU's queue is not drained by metrics while it trains.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping

import torch


def resolve(values: list[float | torch.Tensor]) -> list[float]:
    """`values` as floats; the tensors among them (0-dim) are copied from their device in one transfer each."""
    out = [math.nan] * len(values)
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append((i, v))
        else:
            out[i] = float(v)
    for group in by_device.values():
        floats = torch.stack([t.detach().reshape(()).double() for _, t in group]).tolist()
        for (i, _), f in zip(group, floats):
            out[i] = f
    return out


def resolve_metrics(metrics: MutableMapping[str, list]) -> None:
    """Every list of `metrics` (a trainer's `_metrics[mode]`) as floats, in place, with one transfer per device."""
    keys = [k for k, v in metrics.items() if any(isinstance(x, torch.Tensor) for x in v)]
    flat = [x for k in keys for x in metrics[k]]
    floats = resolve(flat)
    start = 0
    for k in keys:
        n = len(metrics[k])
        metrics[k] = floats[start : start + n]
        start += n
