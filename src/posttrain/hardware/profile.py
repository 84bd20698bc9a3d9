"""Apply a hardware profile (`conf/hw/*.yaml`) to a composed config: one function, `apply_profile(cfg)`.

What a profile decides and where it lands:
- precision: `hw.precision=auto` (hw=cpu) resolves here too (`posttrain.config.precision`: bf16 for a pretrained
  model on a CPU with AMX or AVX512-BF16, fp32 otherwise and for tiny models). Then the model dtype
  (`model.dtype=auto` resolves from `hw.precision`, or is `hw.bf16_param_dtype` when training runs in bf16: hw=cpu
  keeps fp32 master weights under bf16 autocast) and TrainingArguments bf16/fp16 (`posttrain.training_args`); TF32:
  `torch.set_float32_matmul_precision("high")` here.
- attention: `model.attn_implementation` from `hw.attn_implementation[family]` when the model file leaves it null
  (`hw.bf16_attn_implementation[family]` instead when training runs in bf16).
- gradient checkpointing (`use_reentrant=False`): `posttrain.training_args.gradient_checkpointing` (HF Trainer).
  `hw.gradient_checkpointing: null` (the GPU profiles) resolves here, last: on when the memory plan without it does
  not fit the device, off otherwise (it costs a recomputed forward per step). The model file or the command line
  can still force it (`model.gradient_checkpointing=true`, `hw.gradient_checkpointing=true|false`).
- `PYTORCH_CUDA_ALLOC_CONF`: set here (before the first CUDA allocation).
- CPU threads: `hw.threads` -> `torch.set_num_threads` here (null: torch's default, one per core; 0: the cores
  other jobs leave idle when the run starts, `idle_cores`).
- optimizer: `hw.optimizer`, or `hw.optimizer_fallback` when it needs bitsandbytes and that is not installed.
- default batch: `hw.per_device_batch_size` replaces `trainer.per_device_batch_size` unless the command line
  set it (rounded up to a multiple of the algorithm's `batch_multiple`).
- the algorithm's own device-dependent defaults (a loss kernel, a rollout engine, ...: each algorithm keeps its
  table): `Algorithm.apply_hardware`. A profile describes the device only.
- more than one device: `posttrain.dist.launch_hint(cfg)` is the `python -m posttrain.launch ...` line
  (accelerate with conf/accelerate/<hw.accelerate_config>.yaml); the plan shards state (`posttrain.hardware.sharding`).

`posttrain.run.run` applies the profile once, before planning or training; everything after reads the result.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from omegaconf import DictConfig, open_dict

from posttrain.config.compose import override_keys
from posttrain.config.precision import resolve_precision

BNB_OPTIMIZERS = ("8bit", "paged_")  # HF optim names that need bitsandbytes


def cli_overrides() -> set[str]:
    """Keys set on the command line (`trainer.per_device_batch_size`, `kernels`, ...); empty outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    return override_keys(HydraConfig.get().overrides.task)


def has_bitsandbytes() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def resolve_optimizer(hw: DictConfig) -> str:
    """The HF `optim` name to train with: bitsandbytes optimizers fall back when bitsandbytes is missing."""
    name = hw.optimizer
    if any(tag in name for tag in BNB_OPTIMIZERS) and not has_bitsandbytes() and hw.optimizer_fallback:
        return hw.optimizer_fallback
    return name


def default_batch(cfg: DictConfig, batch: int) -> int:
    """Round `batch` up until the global batch is a multiple of the algorithm's unit (e.g. whole groups)."""
    from posttrain.algos.registry import get_algorithm

    multiple = get_algorithm(cfg.algo.name).batch_multiple(cfg)
    while (batch * cfg.trainer.grad_accum * cfg.hw.num_devices) % multiple:
        batch += 1
    return batch


def idle_cores() -> int:
    """Cores this process may use that other jobs leave idle now: usable cores minus the 1-minute load average,
    rounded, at least 1. On a shared machine every OpenMP barrier waits for a thread the scheduler parked; fewer
    threads than cores then run faster (measured: 2 threads at load 5 on 2 cores ran 4x slower than 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def apply_profile(cfg: DictConfig, overrides: set[str] | None = None) -> dict[str, Any]:
    """Apply `cfg.hw` to `cfg` (in place) and to the process (TF32, allocator); returns what it set."""
    hw = cfg.hw
    given = cli_overrides() if overrides is None else overrides
    applied: dict[str, Any] = {}
    precision = resolve_precision(cfg)
    if precision:
        applied["hw.precision"] = precision
    with open_dict(cfg):
        if hw.precision == "bf16" and cfg.model.dtype == "auto" and hw.get("bf16_param_dtype"):
            cfg.model.dtype = hw.bf16_param_dtype
            applied["model.dtype"] = hw.bf16_param_dtype
        if not cfg.model.attn_implementation:
            impl = dict(hw.attn_implementation).get(cfg.model.family)
            if hw.precision == "bf16" and hw.get("bf16_attn_implementation"):
                impl = dict(hw.bf16_attn_implementation).get(cfg.model.family, impl)
            if impl:
                cfg.model.attn_implementation = impl
                applied["model.attn_implementation"] = impl
        optim = resolve_optimizer(hw)
        if optim != hw.optimizer:
            applied["hw.optimizer"] = optim
            hw.optimizer = optim
        if hw.per_device_batch_size and "trainer.per_device_batch_size" not in given:
            batch = default_batch(cfg, int(hw.per_device_batch_size))
            if batch != cfg.trainer.per_device_batch_size:
                cfg.trainer.per_device_batch_size = batch
                applied["trainer.per_device_batch_size"] = batch
    from posttrain.algos.registry import get_algorithm

    applied.update(get_algorithm(cfg.algo.name).apply_hardware(cfg, given))
    if hw.threads is not None:
        threads = int(hw.threads) or idle_cores()
        torch.set_num_threads(threads)
        applied["torch_threads"] = threads
    if hw.tf32:
        torch.set_float32_matmul_precision("high")
        applied["float32_matmul_precision"] = "high"
    if hw.alloc_conf and hw.device == "cuda":
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", hw.alloc_conf)
        applied["PYTORCH_CUDA_ALLOC_CONF"] = os.environ["PYTORCH_CUDA_ALLOC_CONF"]
    if hw.gradient_checkpointing is None:
        with open_dict(cfg):
            hw.gradient_checkpointing = needs_checkpointing(cfg)
        applied["hw.gradient_checkpointing"] = hw.gradient_checkpointing
    return applied


def needs_checkpointing(cfg: DictConfig) -> bool:
    """Whether the memory plan, without activation checkpointing, exceeds the device (`cfg` left unchanged)."""
    from posttrain.hardware.memory import plan

    trial = cfg.copy()
    with open_dict(trial):
        trial.hw.gradient_checkpointing = False
    return not plan(trial).fits
