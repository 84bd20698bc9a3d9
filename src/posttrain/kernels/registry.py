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


@dataclass(frozen=True)
class LossType:
    """A TRL 1.16 `GRPOConfig.loss_type`: how the importance ratio enters each token's loss (`term`) and how the
    masked per-token losses are reduced to a scalar (`reduce`), as `GRPOTrainer._compute_loss` does."""

    name: str
    term: str  # clip (PPO's clipped ratio) | cispo (clipped, detached ratio x logp) | sapo (soft gate) | vespo
    # sequence_mean (per-sequence mean, then batch mean) | batch_tokens (this batch's token mean) |
    # max_length (/ (B * max_completion_length)) | window_tokens (/ tokens of the accumulation window, all
    # processes: TRL's num_items_in_batch) | sequence_sum (batch mean of per-sequence sums)
    reduce: str
    summary: str


LOSSES: dict[str, LossType] = {
    t.name: t
    for t in (
        LossType("grpo", "clip", "sequence_mean", "per-sequence token mean, then batch mean (DeepSeekMath)"),
        LossType("bnpo", "clip", "batch_tokens", "token mean over the local batch"),
        LossType("dr_grpo", "clip", "max_length", "sum / (B * max_completion_length) (Dr. GRPO)"),
        LossType("dapo", "clip", "window_tokens", "sum / tokens of the whole accumulation window (DAPO)"),
        LossType("cispo", "cispo", "window_tokens", "clipped, detached ratio times log-prob (MiniMax-M1)"),
        LossType("sapo", "sapo", "sequence_mean", "sigmoid gate instead of a hard clip (SAPO)"),
        LossType("luspo", "clip", "sequence_sum", "each sequence's loss scaled by its length (LUSPO)"),
        LossType("vespo", "vespo", "window_tokens", "gamma weight of the sequence ratio (VESPO)"),
    )
}
# TRL 1.16 GRPOTrainer's loss options
LOSS_TYPES: tuple[str, ...] = tuple(LOSSES)
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
IS_LEVELS: tuple[str, ...] = ("token", "sequence")
# TRL's `vllm_importance_sampling_mode`: per token or per sequence; ratios outside [clip_min, clip_max] clipped or 0
SAMPLING_IS_MODES: tuple[str, ...] = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
TRL = "trl"  # `kernels=trl`: TRL's own loss path (no posttrain kernel)


@dataclass(frozen=True)
class Backend:
    """A log-prob backend: `function` in `module` computes per-token log-probs,
    `fn(hidden [N, H], weight [V, H], targets [N], temperature) -> logp [N]`; TRL's loss takes them from there."""

    name: str
    module: str
    function: str
    summary: str
    requires: tuple[str, ...] = ()  # importable modules it needs
    native_cpu: bool = True  # False: on CPU it only runs in an interpreter (tests yes, benchmarks no)
    device_check: Callable[[], tuple[bool, str]] | None = None
    # `fn(hidden, weight, targets, temperature) -> (logp [N], entropy [N])` from the same pass, when it has one
    entropy_function: str | None = None
    entropy_grad: bool = False  # its entropy carries a gradient (what TRL's entropy bonus, `entropy_coef`, needs)
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
        "materialized fp32 [tokens, V] logits: the reference",
        entropy_function="eager_logps_entropy",
        entropy_grad=True,
        fp32_softmax=True,
    ),
    Backend(
        "chunked",
        "posttrain.kernels.chunked",
        "chunked_logps",
        "TRL's ChunkedLogProbFunction (what GRPOTrainer itself runs)",
        ("trl",),
        entropy_function="chunked_logps_entropy",
        entropy_grad=True,
    ),
    Backend(
        "fused",
        "posttrain.kernels.fused",
        "fused_logps",
        "ours: two GEMMs per tile, hidden-state gradient finished in the forward (CUDA: the `triton` path)",
        entropy_function="fused_logps_entropy",
        fp32_softmax=True,
    ),
    Backend(
        "triton",
        "posttrain.kernels.fused_device",
        "device_logps",
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
        "`fused` as a JAX Pallas kernel (TPU; CPU in interpret mode)",
        ("jax",),
        False,
    ),
)
BACKENDS: dict[str, Backend] = {b.name: b for b in _TABLE}
CHOICES: tuple[str, ...] = (TRL, *BACKENDS)  # the values of `kernels.backend`


def refusal(backend: str, *, top_entropy_quantile: float = 1.0, entropy_bonus: bool = False) -> str | None:
    """Why `backend` (a row of BACKENDS, or `trl`) cannot give TRL's loss what these options need, or None when it
    can; config validation turns it into an `error:` line. `entropy_bonus`: TRL's `entropy_coef != 0` or
    `use_adaptive_entropy` (the bonus needs a differentiable entropy; the top-entropy mask only its values)."""
    if backend == TRL:
        return None
    row = BACKENDS[backend]
    if entropy_bonus and not row.entropy_grad:
        have = ", ".join(n for n, b in BACKENDS.items() if b.entropy_grad)
        return f"the entropy bonus (entropy_coef) needs an entropy gradient, which {backend} lacks ({have} have it)"
    if top_entropy_quantile < 1.0 and row.entropy_function is None:
        return f"top_entropy_quantile needs the per-token entropy, which {backend} does not compute"
    return None


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
