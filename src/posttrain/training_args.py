"""Map the shared `trainer`/`hw`/`logger` config groups onto HF `TrainingArguments` keyword arguments.

Every algorithm's trainer (TRL GRPOConfig, HF TrainingArguments for D2L and contrastive) starts from these,
so gradient accumulation, schedulers, checkpointing and precision mean the same thing everywhere.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.engines import started_engine


def report_to(logger_cfg: DictConfig, run_dir: Path) -> list[str]:
    """metrics.jsonl is always written by our callback; wandb is added on request (offline without a key)."""
    if logger_cfg.name != "wandb":
        return []
    mode = logger_cfg.wandb_mode
    if mode == "auto":
        mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    os.environ.setdefault("WANDB_MODE", mode)
    os.environ.setdefault("WANDB_PROJECT", logger_cfg.project)
    if logger_cfg.entity:
        os.environ.setdefault("WANDB_ENTITY", logger_cfg.entity)
    os.environ.setdefault("WANDB_DIR", str(run_dir))
    for key, value in wandb_names(run_dir).items():  # what wandb.init reads; a value the user set wins
        if key not in os.environ or key in _SET_BY_US:  # ours are renewed per run (multirun jobs share a process)
            os.environ[key] = value
            _SET_BY_US.add(key)
    return ["wandb"]


_SET_BY_US: set[str] = set()


def wandb_names(run_dir: Path) -> dict[str, str]:
    """The W&B run's name (the run dir's), group (the sweep's dir, in a multirun) and tags (the command line's
    overrides, W&B's 64-character limit each)."""
    names = {"WANDB_NAME": run_dir.name if run_dir.name not in ("", ".") else str(run_dir)}
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized():
            hc = HydraConfig.get()
            if hc.mode == RunMode.MULTIRUN:
                names["WANDB_RUN_GROUP"] = Path(hc.sweep.dir).name
                names["WANDB_NAME"] = f"{Path(hc.sweep.dir).name}/{run_dir.name}"
            tags = [o for o in hc.overrides.task if not o.startswith("hydra.")]
            if tags:
                names["WANDB_TAGS"] = ",".join(t.replace(",", ";")[:64] for t in tags)
    except ImportError:
        pass
    return names


def gradient_checkpointing(cfg: DictConfig) -> bool:
    """Activation (gradient) checkpointing: asked for by the model file or the hardware profile."""
    return bool(cfg.model.gradient_checkpointing or cfg.hw.gradient_checkpointing)


def quiet_trl_checkpointing_toggles() -> None:
    """Silence transformers' FutureWarnings for its deprecated checkpointing aliases, and only those.

    We enable checkpointing through `activation_checkpointing` (HF Trainer calls `activation_checkpointing_enable`).
    TRL 1.16's GRPOTrainer switches it off and on around every generation and scoring pass (`trl.models.utils`:
    `_unwrap_model_for_generation`, `disable_gradient_checkpointing`) through `is_gradient_checkpointing`,
    `gradient_checkpointing_disable` and `gradient_checkpointing_enable`: six FutureWarnings per step, and no TRL
    option calls the new names. The aliases forward to the same methods, so nothing is lost. Idempotent.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)` is "
        r"deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils",
    )


def common_training_kwargs(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    t, hw = cfg.trainer, cfg.hw
    use_gc = gradient_checkpointing(cfg)
    if use_gc:
        quiet_trl_checkpointing_toggles()
    save_steps = t.save_steps if t.save_steps > 0 else t.max_steps
    kwargs: dict[str, Any] = {}
    if started_engine():  # FSDP/DeepSpeed on CPU processes: accelerate's state is already set (posttrain.engines)
        kwargs["accelerator_config"] = {"use_configured_state": True}
    return kwargs | {
        "output_dir": str(run_dir / "checkpoints"),
        "max_steps": t.max_steps,
        "per_device_train_batch_size": t.per_device_batch_size,
        "gradient_accumulation_steps": t.grad_accum,
        "learning_rate": t.lr,
        "weight_decay": t.weight_decay,
        "warmup_steps": t.warmup_steps,
        "lr_scheduler_type": t.lr_scheduler,
        "max_grad_norm": t.max_grad_norm,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": t.save_total_limit,
        "logging_steps": t.logging_steps,
        "logging_first_step": True,
        "disable_tqdm": not t.progress_bar,
        "dataloader_num_workers": t.dataloader_num_workers,
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "bf16": hw.precision == "bf16",
        "fp16": hw.precision == "fp16",
        "tf32": bool(hw.tf32) if hw.device == "cuda" else None,
        "optim": hw.optimizer,
        "use_cpu": hw.device == "cpu",
        "report_to": report_to(cfg.logger, run_dir),
        "run_name": run_dir.name,
        # the Trainer enables it on the model (non-reentrant: works with frozen inputs, LoRA and PEFT)
        "activation_checkpointing": use_gc,
        "activation_checkpointing_kwargs": {"use_reentrant": False} if use_gc else None,
    }
