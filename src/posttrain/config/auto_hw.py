"""`hw=auto`: replace the placeholder profile by the one that matches this machine's device, before validation.

No CUDA device: `hw=cpu`, unchanged (the same resolved config, so the same numbers). A CUDA device picks a profile
by its name: H100/H200 (and H800, GH200) -> `h200`, A100/A800 -> `a100` (80 GB) or `a100_40gb`, RTX 4090 ->
`rtx4090`; any other GPU the profile nearest its memory (at least 70 GiB: `a100`, 32: `a100_40gb`, else `rtx4090`),
in fp32 without TF32 before Ampere (no bf16 tensor cores). `hw.device_gib` is the device's measured memory. Every
`hw.*` key the command line (or an experiment file) sets wins over the chosen profile's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.paths import HW_DIR

AUTO = "auto"
_GIB = 1024**3
# (lower-case substring of the CUDA device name, profile); first match wins
_BY_NAME = (("h100", "h200"), ("h200", "h200"), ("h800", "h200"), ("4090", "rtx4090"))
_A100 = ("a100", "a800")
_BY_MEMORY = ((70.0, "a100"), (32.0, "a100_40gb"), (0.0, "rtx4090"))  # unknown GPUs: (at least GiB, profile)


@dataclass(frozen=True)
class CudaDevice:
    name: str
    gib: float  # total memory
    capability: tuple[int, int]

    def __str__(self) -> str:
        return f"{self.name} ({self.gib:.1f} GiB, sm_{self.capability[0]}{self.capability[1]})"


def cuda_device() -> CudaDevice | None:
    """The first CUDA device as torch sees it, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return CudaDevice(props.name, props.total_memory / _GIB, (props.major, props.minor))


def choose_profile(device: CudaDevice | None) -> tuple[str, dict[str, Any]]:
    """The profile for `device` and the keys that replace the profile's own (measured memory, precision)."""
    if device is None:
        return "cpu", {}
    name = device.name.lower()
    profile = next((p for key, p in _BY_NAME if key in name), None)
    if profile is None and any(key in name for key in _A100):
        profile = "a100" if device.gib > 60 else "a100_40gb"
    if profile is None:
        profile = next(p for least, p in _BY_MEMORY if device.gib >= least)
    changes: dict[str, Any] = {"device_gib": math.floor(device.gib * 100) / 100}
    if device.capability < (8, 0):
        changes.update(precision="fp32", tf32=False)
    return profile, changes


def resolve_auto_hw(cfg: DictConfig, overrides: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    """Replace `hw=auto` in `cfg` (in place) by the profile of this machine's device; returns a line saying what it
    chose, None when `hw` is not `auto`. Kept from `cfg.hw`: the keys in `overrides` (the command line's) and every
    value that differs from the schema's default (an experiment file's)."""
    if cfg.hw.name != AUTO:
        return None
    from posttrain.config.schema import HwConfig

    device = cuda_device()
    profile, changes = choose_profile(device)
    default = OmegaConf.structured(HwConfig)
    given = {
        k: cfg.hw[k]
        for k in cfg.hw
        if k != "name"
        and not OmegaConf.is_missing(cfg.hw, k)
        and (f"hw.{k}" in overrides or OmegaConf.is_missing(default, k) or cfg.hw[k] != default[k])
    }
    with open_dict(cfg):
        cfg.hw = OmegaConf.merge(cfg.hw, OmegaConf.load(HW_DIR / f"{profile}.yaml"), changes, given)
    kept = "".join(f" hw.{k}={v}" for k, v in changes.items() if k not in given)
    return f"hw=auto: {device or 'no CUDA device'} -> hw={profile}{kept}"
