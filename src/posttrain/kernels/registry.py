"""The one table of policy-loss kernel backends and GRPO loss options; everything else reads it.

Config validation, `grpo_loss` dispatch, gradcheck, the benchmark and the docs take their names from here.
No torch import: composing a config reads `CHOICES` before anything heavy loads.

    from posttrain.kernels.registry import BACKENDS, available
    BACKENDS["fused"].load()            # the backend's function (imported on first use)
    available("triton")                 # (False, "triton needs a CUDA device, or TRITON_INTERPRET=1 ...")
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass

# TRL 1.16 GRPOTrainer loss options the kernel path implements (policy_loss_from_logps)
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
IS_LEVELS: tuple[str, ...] = ("token", "sequence")
KL_BIAS_CORRECTION = True  # TRL 1.16's `use_bias_correction_kl` default (tests tie it to GRPOConfig)
TRL = "trl"  # `kernels=trl`: TRL's own loss path (no posttrain kernel)


@dataclass(frozen=True)
class Backend:
    """A policy-loss backend: `function` in `module` computes per-token log-probs (`kind="logps"`:
    `fn(hidden [N, H], weight [V, H], targets [N], temperature) -> logp [N]`, the loss is then
    `policy_loss_from_logps`) or the whole loss (`kind="loss"`, the `grpo_loss` contract)."""

    name: str
    module: str
    function: str
    kind: str  # logps | loss
    summary: str
    requires: tuple[str, ...] = ()  # importable modules it needs
    native_cpu: bool = True  # False: on CPU it only runs in an interpreter (tests yes, benchmarks no)
    device_check: Callable[[], tuple[bool, str]] | None = None
    # `fn(hidden, weight, targets, temperature) -> (logp [N], entropy [N])` from the same pass, when it has one
    entropy_function: str | None = None
    fp32_softmax: bool = False  # from bf16 inputs it computes the logits' softmax in fp32 (no fp32 head cast needed)

    def load(self) -> Callable:
        return getattr(importlib.import_module(self.module), self.function)

    def load_with_entropy(self) -> Callable | None:
        if self.entropy_function is None:
            return None
        return getattr(importlib.import_module(self.module), self.entropy_function)


def _triton_device() -> tuple[bool, str]:
    import torch

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return True, ""
    return False, "triton needs a CUDA device, or TRITON_INTERPRET=1 to run on CPU"


_TABLE = (
    Backend(
        "eager",
        "posttrain.kernels.eager",
        "eager_logps",
        "logps",
        "materialized fp32 [tokens, V] logits: the reference",
        fp32_softmax=True,
    ),
    Backend(
        "chunked",
        "posttrain.kernels.chunked",
        "chunked_logps",
        "logps",
        "TRL's ChunkedLogProbFunction (what GRPOTrainer itself runs)",
        ("trl",),
    ),
    Backend(
        "liger",
        "posttrain.kernels.liger",
        "liger_grpo_loss",
        "loss",
        "Liger's LigerFusedLinearGRPOFunction (k3 KL only)",
        ("liger_kernel",),
    ),
    Backend(
        "fused",
        "posttrain.kernels.fused",
        "fused_logps",
        "logps",
        "ours: two GEMMs per tile, hidden-state gradient finished in the forward (CUDA: the `triton` path)",
        entropy_function="fused_logps_entropy",
        fp32_softmax=True,
    ),
    Backend(
        "triton",
        "posttrain.kernels.fused_device",
        "device_logps",
        "logps",
        "`fused` for GPUs: large tiles, bf16 GEMMs with fp32 output, one Triton fold per tile, no host sync "
        "(what `fused` runs on CUDA; CPU with TRITON_INTERPRET=1)",
        ("triton",),
        False,
        _triton_device,
        entropy_function="device_logps_entropy",
        fp32_softmax=True,
    ),
    Backend(
        "pallas",
        "posttrain.kernels.pallas",
        "pallas_logps",
        "logps",
        "`fused` as a JAX Pallas kernel (TPU; CPU in interpret mode)",
        ("jax",),
        False,
    ),
)
BACKENDS: dict[str, Backend] = {b.name: b for b in _TABLE}
CHOICES: tuple[str, ...] = (TRL, *BACKENDS)  # the values of `kernels.backend`


def available(name: str) -> tuple[bool, str]:
    """(True, "") when backend `name` runs in this environment, else (False, the reason)."""
    backend = BACKENDS.get(name)
    if backend is None:
        return False, f"unknown backend {name!r}; one of {tuple(BACKENDS)}"
    for module in backend.requires:
        if importlib.util.find_spec(module) is None:
            return False, f"{module} is not installed"
    return backend.device_check() if backend.device_check else (True, "")


def native_backends(device: str = "cpu") -> list[str]:
    """Backends that run natively (not interpreted) and are available here: what benchmarks compare."""
    return [n for n, b in BACKENDS.items() if (device != "cpu" or b.native_cpu) and available(n)[0]]
