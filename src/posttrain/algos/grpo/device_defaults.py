"""GRPO's device-dependent defaults: the log-prob kernel, the rollout engine and its sampler, by hardware profile
(`hw.name`) and else by device kind (`hw.device`). vLLM's mode and memory share are TRL's (`algo.trl.vllm_mode`,
`algo.trl.vllm_gpu_memory_utilization`: colocated, 0.3), the same on every CUDA profile measured.

The profiles in conf/hw/ describe the device only; `GRPO.apply_hardware` applies these where the command line left
the key, each a speed default chosen by the measurement beside it (a loss the chosen kernel cannot feed falls back
to one that can: `GRPO.apply_hardware`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeviceDefaults:
    kernels: str | None = None  # replaces the default `kernels=trl`; None: keep TRL's head
    # `algo.generation.backend` when training runs in bf16, or on a CPU for a pretrained model, and the command line
    # left it `hf` (a merged copy only while it takes at most GPU_COPY_SHARE / CPU_COPY_SHARE of the device)
    generation_backend: str | None = None
    generation_sampler: str | None = None  # a rollout engine's `algo.generation.sampler`; None: the algorithm's


BY_DEVICE: dict[str, DeviceDefaults] = {
    # fused: loss+backward 2.3 s vs 3.4 s (trl) per make-train step; bf16_copy: a merged, oneDNN-packed bf16 copy
    # samples (experiments/grpo_step); inverse_cdf: torch.multinomial draws one exponential per vocabulary entry on a
    # CPU, ~20 ms of a 16-row decode step of SmolLM2 (posttrain.rollout.inverse_cdf)
    "cpu": DeviceDefaults(kernels="fused", generation_backend="bf16_copy", generation_sampler="inverse_cdf"),
    # hf and TRL's head until measured on the card (the H200's choices below)
    "cuda": DeviceDefaults(),
    "xla": DeviceDefaults(kernels="pallas"),
}
BY_PROFILE: dict[str, DeviceDefaults] = {
    # static: GRPO step 0.22 s vs 0.78 s (hf); fused: loss fwd+bwd 10.3 ms vs 12.6 (TRL chunked) at 2048x2880x201088,
    # fastest at all 3 shapes (experiments/gpu)
    "h200": DeviceDefaults(kernels="fused", generation_backend="static"),
}


def device_defaults(hw: Any) -> DeviceDefaults:
    """The defaults for the profile `hw` (a DictConfig with `name` and `device`)."""
    return BY_PROFILE.get(str(hw.name)) or BY_DEVICE.get(str(hw.device), DeviceDefaults())
