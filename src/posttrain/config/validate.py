"""Rules checked after composition and before any model loads (one-line `ConfigError`s): finite numbers, choices,
each field's declared range or path kind (posttrain.config.fields), then the cross-field rules."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from posttrain.config.fields import check_declared
from posttrain.config.finite import check_finite
from posttrain.config.schema import LORA_TARGETS
from posttrain.errors import ConfigError
from posttrain.kernels.registry import CHOICES as KERNEL_CHOICES

__all__ = ["ConfigError", "check_choices", "validate"]


_CHOICES = {
    "mode": ("train", "plan", "eval", "export", "sample"),
    "model.family": ("llama", "gpt_oss"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "model.mxfp4": ("dequantize", "native"),
    "hw.precision": ("fp32", "bf16", "fp16", "auto"),
    "kernels.backend": KERNEL_CHOICES,
    "logger.name": ("jsonl", "wandb"),
    "data.source": ("generator", "hub", "jsonl"),
    "model.lora.targets": tuple(LORA_TARGETS),
}


def _get(cfg: DictConfig, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def check_choices(cfg: DictConfig, choices: dict, prefix: str = "") -> None:
    """Each dotted key of `choices` must hold one of its allowed values (`prefix` names `cfg` in the message)."""
    for key, allowed in choices.items():
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{prefix}{key}={value!r} is not one of {', '.join(allowed)}")


def _check_hf_names(cfg: DictConfig) -> None:
    """Scheduler and optimizer names HF TrainingArguments accepts (else a traceback deep in the trainer)."""
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    for key, enum in (("trainer.lr_scheduler", SchedulerType), ("hw.optimizer", OptimizerNames)):
        value = _get(cfg, key)
        allowed = [e.value for e in enum]
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    fallback = cfg.hw.get("optimizer_fallback")
    if fallback is not None and fallback not in [e.value for e in OptimizerNames]:
        raise ConfigError(f"hw.optimizer_fallback={fallback!r} is not an HF optimizer name")


def _check_mxfp4(model: DictConfig) -> None:
    if model.mxfp4 == "native" and model.quantization != "mxfp4":
        raise ConfigError(
            "model.mxfp4=native keeps MXFP4 experts: it needs model.quantization=mxfp4 "
            f"(model={model.name} has model.quantization={model.quantization or 'null'})"
        )
    if model.mxfp4 == "native" and model.lora.experts:
        raise ConfigError(
            "model.lora.experts=true adapts the experts' bf16 weights: use model.mxfp4=dequantize (native experts "
            "are frozen MXFP4)"
        )
    if model.quantization == "mxfp4" and model.tiny:
        for key in ("hidden_size", "intermediate_size"):
            size = model.arch.get(key)
            if size is not None and int(size) % 32:
                raise ConfigError(f"model.arch.{key}={size}: MXFP4 experts need a multiple of 32 (one scale per 32)")


def validate(cfg: DictConfig, hf_names: bool = True) -> None:
    """Raise ConfigError on the first rule the composed config breaks.

    `hf_names=False` skips the checks against transformers (scheduler and optimizer names, the model's architecture
    numbers and attention implementation: `posttrain.models.checks`), which import it (and so torch): the CLI's
    pre-check stays fast and `posttrain.run.run` checks them before anything loads.
    """
    check_finite(cfg)  # nan/inf in any numeric field of any group, before the rules below compare numbers
    check_choices(cfg, _CHOICES)
    check_declared(cfg)  # every field of every group against its declared range or path kind
    if hf_names:
        from posttrain.models.checks import check_arch, check_attention, check_chat_template, check_model_files

        _check_hf_names(cfg)
        check_arch(cfg.model)
        check_attention(cfg.model, str(cfg.hw.device))
        check_chat_template(cfg.model)
        check_model_files(cfg.model, reads_files=cfg.mode != "plan")
    if cfg.resume not in (None, "auto") and not isinstance(cfg.resume, str):
        raise ConfigError(f"resume={cfg.resume!r} must be null, auto or a checkpoint path")
    if cfg.trainer.get("stop_step") and cfg.trainer.stop_step >= cfg.trainer.max_steps:
        raise ConfigError(
            f"trainer.stop_step={cfg.trainer.stop_step} must be below trainer.max_steps={cfg.trainer.max_steps} "
            "(the schedule's length): it ends training early"
        )
    if cfg.model.quantization == "mxfp4" and cfg.model.family != "gpt_oss":
        raise ConfigError("model.quantization=mxfp4 is only for GPT-OSS checkpoints")
    if cfg.model.quantization not in (None, "mxfp4", "bnb4"):
        raise ConfigError(f"model.quantization={cfg.model.quantization!r} is not one of mxfp4, bnb4, null")
    if cfg.model.family == "gpt_oss" and cfg.model.hub_id and cfg.model.quantization == "bnb4":
        raise ConfigError(
            "model.quantization=bnb4 on GPT-OSS: its MXFP4 checkpoint is dequantized to bf16, never combined "
            "with a bitsandbytes config"
        )
    _check_mxfp4(cfg.model)
    if cfg.model.lora.experts and cfg.model.family != "gpt_oss":
        raise ConfigError("model.lora.experts=true needs a MoE model (family gpt_oss)")
    if cfg.model.lora.targets != "attention" and not OmegaConf.is_interpolation(cfg.model.lora, "target_modules"):
        raise ConfigError(
            f"model.lora.targets={cfg.model.lora.targets} and model.lora.target_modules both name the LoRA targets: "
            "give one"
        )
    from posttrain.algos.registry import get_algorithm

    get_algorithm(cfg.algo.name).validate(cfg)
