"""`algo=contrastive` schema (registered by name in posttrain.config.registry) and its cross-field rules."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posttrain.config.validate import ConfigError


@dataclass
class ContrastiveAlgoConfig:
    name: str = "contrastive"
    max_length: int = 384  # tokens per triplet member (longer members are a DataError, never truncated)
    temperature: float = 0.1  # InfoNCE temperature on cosine similarities
    contrastive_weight: float = 1.0
    lm_weight: float = 1.0
    lm_on_counterfactual: bool = False  # LM loss on benign always, injected per lm_on_injected; paraphrase on request
    lm_on_injected: bool = True  # false: no LM loss on injected rows (only the contrastive term sees injections)
    in_batch_negatives: bool = True  # other examples' members are negatives too (else only the own injection)
    pool: str = "prompt"  # masked-mean pooling over prompt tokens | all real tokens
    head_hidden_dim: int = 256  # 0: linear projection head
    proj_dim: int = 128
    pad_to_max_length: bool = False  # pre-pad in the dataset (static shapes); same rule as the collator
    init_from: str | None = None  # checkpoint dir whose adapters + head start this run (fresh optimizer)
    # evaluation (greedy replies; mode=eval scores `eval.checkpoint`, "init" = base + algo.init_from)
    max_new_tokens: int = 12
    eval_batch_size: int = 32
    eval_at_end: bool = True  # after training, score the starting and the final weights ("before" / "after")


def validate_contrastive(cfg: DictConfig) -> None:
    algo = cfg.algo
    if algo.temperature <= 0:
        raise ConfigError(f"algo.temperature={algo.temperature} must be > 0")
    if algo.contrastive_weight < 0 or algo.lm_weight < 0:
        raise ConfigError("algo.contrastive_weight and algo.lm_weight must be >= 0")
    if algo.contrastive_weight == 0 and algo.lm_weight == 0:
        raise ConfigError("algo.contrastive_weight and algo.lm_weight are both 0: nothing to train")
    if algo.pool not in ("prompt", "all"):
        raise ConfigError(f"algo.pool={algo.pool!r} is not one of prompt, all")
    sizes = {
        "max_length": algo.max_length,
        "proj_dim": algo.proj_dim,
        "max_new_tokens": algo.max_new_tokens,
        "eval_batch_size": algo.eval_batch_size,
    }
    for key, value in sizes.items():
        if value <= 0:
            raise ConfigError(f"algo.{key}={value} must be > 0")
    if algo.head_hidden_dim < 0:
        raise ConfigError(f"algo.head_hidden_dim={algo.head_hidden_dim} must be >= 0")
    if not cfg.model.lora.enabled:
        raise ConfigError("algo=contrastive trains LoRA adapters + a projection head: model.lora.enabled must be true")
