"""How a multi-device strategy splits training state, from the hw profile alone (no torch): `sharding(hw)`."""

from __future__ import annotations

from omegaconf import DictConfig


def sharding(hw: DictConfig) -> str:
    """How the multi-device strategy splits state: none | optimizer | grads+optimizer | all."""
    name = (hw.accelerate_config or "").lower()
    if hw.num_devices <= 1:
        return "none"
    if "zero3" in name or "fsdp" in name:
        return "all"
    if "zero2" in name:
        return "grads+optimizer"
    if "zero1" in name:
        return "optimizer"
    return "none"
