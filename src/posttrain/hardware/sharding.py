"""How a multi-device strategy splits training state, from the hw profile alone (no torch): `sharding(hw)`, and
which sharded engine it is: `engine_of(hw)`."""

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


def engine_of(hw: DictConfig) -> str:
    """The sharded engine `hw.accelerate_config` names on more than one device: fsdp | zero2 | zero3 | none."""
    name = (hw.accelerate_config or "").lower()
    if hw.num_devices <= 1:
        return "none"
    if "fsdp" in name:
        return "fsdp"
    for stage in ("zero3", "zero2"):
        if stage in name:
            return stage
    return "none"
