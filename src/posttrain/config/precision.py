"""`hw.precision=auto` (hw=cpu): bf16 for a pretrained model on a CPU with AMX bf16 units, fp32 otherwise. Tiny
random models stay fp32 (their tests compare runs exactly). Resolved when a config is composed and when the hw
profile is applied, so everything after reads fp32 or bf16. No torch import: composing stays light."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict


def cpu_has_amx_bf16() -> bool:
    """Whether this CPU has AMX bf16 matrix units (Linux `/proc/cpuinfo` flags; False where it cannot tell)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any("amx_bf16" in line.split() for line in text.splitlines() if line.startswith("flags"))


def resolve_precision(cfg: DictConfig) -> str | None:
    """Replace `hw.precision=auto` in `cfg` with bf16 or fp32 (module docstring); returns the value it chose, None
    when the profile named one."""
    if cfg.hw.precision != "auto":
        return None
    chosen = "bf16" if not cfg.model.tiny and cpu_has_amx_bf16() else "fp32"
    with open_dict(cfg):
        cfg.hw.precision = chosen
    return chosen
