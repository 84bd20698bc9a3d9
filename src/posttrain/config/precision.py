"""`hw.precision=auto` (hw=cpu): bf16 for a pretrained model on a CPU with bf16 matrix instructions (AMX or
AVX512-BF16), fp32 otherwise. Tiny random models stay fp32 (their tests compare runs exactly). Resolved when a config
is composed and when the hw profile is applied, so everything after reads fp32 or bf16. No torch import: composing
stays light.

Measured on `make train` (experiments/grpo_step, experiments/grpo_objectives): bf16 autocast with fp32 master weights
costs 0.6x fp32's time per GRPO step on a Sapphire Rapids core (AMX) and 0.7x on an AMD EPYC (Zen 4: AVX512-BF16, no
AMX), with the same held-out accuracy. Without either, oneDNN emulates bf16 and fp32 is the faster choice.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of the instructions oneDNN runs bf16 GEMMs on


def cpu_has_bf16_units() -> bool:
    """Whether this CPU has bf16 matrix instructions, AMX or AVX512-BF16 (Linux `/proc/cpuinfo` flags; False where
    it cannot tell)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(
        any(flag in BF16_FLAGS for flag in line.split()) for line in text.splitlines() if line.startswith("flags")
    )


def resolve_precision(cfg: DictConfig) -> str | None:
    """Replace `hw.precision=auto` in `cfg` with bf16 or fp32 (module docstring); returns the value it chose, None
    when the profile named one."""
    if cfg.hw.precision != "auto":
        return None
    chosen = "bf16" if not cfg.model.tiny and cpu_has_bf16_units() else "fp32"
    with open_dict(cfg):
        cfg.hw.precision = chosen
    return chosen
