"""PEFT LoRA from `model.lora`: the modules `model.lora.targets` names (`attention`: q, k, v, o; `all_linear`: also
Llama's gate, up, down; GPT-OSS's attention, see `posttrain.config.schema.LORA_TARGETS`), resolved into
`model.lora.target_modules` at compose time (so the memory plan reads the same list), and GPT-OSS experts via
`target_parameters` (`model.lora.experts`)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig
from peft import LoraConfig, get_peft_model
from transformers import PreTrainedModel


def lora_config(model_cfg: DictConfig) -> LoraConfig:
    lcfg = model_cfg.lora
    kwargs: dict[str, Any] = {}
    if lcfg.experts:
        # Experts are batched nn.Parameters ([E, in, out]), not nn.Linear: PEFT wraps them by parameter name.
        kwargs["target_parameters"] = list(lcfg.expert_parameters)
    return LoraConfig(
        r=lcfg.r,
        lora_alpha=lcfg.alpha,
        lora_dropout=lcfg.dropout,
        target_modules=list(lcfg.target_modules),
        task_type="CAUSAL_LM",
        bias="none",
        **kwargs,
    )


def apply_lora(model: PreTrainedModel, model_cfg: DictConfig):
    from posttrain.models.checks import check_lora_targets

    check_lora_targets(model, model_cfg)  # one line naming the model's layers, not PEFT's traceback
    return get_peft_model(model, lora_config(model_cfg))
