"""`algo=contrastive` schema (registered by name in posttrain.config.registry) and its cross-field rules."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posttrain.config.ranges import local_path, num
from posttrain.config.validate import ConfigError


@dataclass
class ContrastiveAlgoConfig:
    name: str = "contrastive"
    max_length: int = num(384, gt=0)  # tokens per triplet member (longer members are a DataError, never truncated)
    temperature: float = num(0.1, gt=0)  # InfoNCE temperature on cosine similarities
    contrastive_weight: float = num(1.0, ge=0)
    lm_weight: float = num(1.0, ge=0)
    lm_on_counterfactual: bool = False  # LM loss on benign always, injected per lm_on_injected; paraphrase on request
    lm_on_injected: bool = True  # false: no LM loss on injected rows (only the contrastive term sees injections)
    in_batch_negatives: bool = True  # other examples' members are negatives too (else only the own injection)
    pool: str = "prompt"  # masked-mean pooling over prompt tokens | all real tokens
    head_hidden_dim: int = num(256, ge=0, note="0: linear projection head")
    proj_dim: int = num(128, gt=0)
    pad_to_max_length: bool = False  # pre-pad in the dataset (static shapes); same rule as the collator
    # checkpoint dir whose adapters + head start this run (fresh optimizer)
    init_from: str | None = local_path(None, kind="dir", noun="checkpoint directory")
    # evaluation (greedy replies; mode=eval scores `eval.checkpoint`, "init" = base + algo.init_from)
    max_new_tokens: int = num(12, gt=0)
    eval_batch_size: int = num(32, gt=0)
    eval_at_end: bool = True  # after training, score the starting and the final weights ("before" / "after")


def validate_contrastive(cfg: DictConfig) -> None:
    algo = cfg.algo
    if algo.contrastive_weight == 0 and algo.lm_weight == 0:
        raise ConfigError("algo.contrastive_weight and algo.lm_weight are both 0: nothing to train")
    if algo.pool not in ("prompt", "all"):
        raise ConfigError(f"algo.pool={algo.pool!r} is not one of prompt, all")
    if not cfg.model.lora.enabled:
        raise ConfigError("algo=contrastive trains LoRA adapters + a projection head: model.lora.enabled must be true")
