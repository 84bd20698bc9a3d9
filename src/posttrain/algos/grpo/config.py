"""`algo=grpo` schema (its defaults are THE defaults) and its cross-field rules, checked before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from posttrain.config.ranges import num
from posttrain.config.validate import ConfigError, check_choices
from posttrain.kernels.registry import IS_LEVELS, KL_BIAS_CORRECTION, KL_ESTIMATORS, LOSS_TYPES, TRL
from posttrain.rollout import BACKENDS as ROLLOUT_BACKENDS


@dataclass
class KLConfig:
    estimator: str = "k3"  # k1 | k2 | k3 (TRL's loss has k3 only; k1/k2 need kernels=<backend>)
    # KL term times the importance ratio (TRL's use_bias_correction_kl and its default; DeepSeek-V3.2), every backend
    bias_correction: bool = KL_BIAS_CORRECTION
    # adaptive beta toward this per-token KL; null: fixed beta
    target: float | None = num(None, gt=0, note="or null: fixed beta")
    horizon: int | None = num(None, gt=0)  # steps; null: proportional rule (posttrain.algos.grpo.kl_control)
    beta_min: float = num(1e-6, ge=0)
    beta_max: float = num(10.0, gt=0)


@dataclass
class GenerationConfig:
    # the rollout engine (posttrain.rollout): hf (TRL's generate on the policy) | bf16_copy (merged bf16 copy, CPU) |
    # static (merged copy, static KV cache, compiled decode) | vllm (TRL's vLLM)
    backend: str = "hf"
    vllm_mode: str = "colocate"  # colocate | server
    compile: bool | None = None  # static: compile the decode step (null: on CUDA only, where it is CUDA graphs)
    temperature: float = num(1.0, gt=0)  # transformers GenerationConfig; TRL divides logits by it
    top_p: float = num(1.0, gt=0, le=1)  # TRL GRPOConfig, vLLM SamplingParams
    top_k: int = num(0, ge=0, note="0: off")


@dataclass
class GRPOAlgoConfig:
    name: str = "grpo"
    # completions per prompt (one group); trainer.per_device_batch_size counts completions
    num_generations: int = num(8, ge=2, note="advantages are per group")
    max_prompt_length: int = num(256, gt=0)  # a guard: longer prompts are refused (TRL does not truncate)
    max_completion_length: int = num(16, gt=0)
    loss_type: str = "grpo"  # grpo | bnpo | dr_grpo | dapo
    beta: float = num(0.04, ge=0)  # KL coefficient (0: no reference model)
    epsilon: float = num(0.2, ge=0)  # clip range [1 - epsilon, 1 + epsilon_high]
    epsilon_high: float | None = num(None, ge=0)  # null: epsilon
    scale_rewards: str = "group"  # group | batch | none
    importance_sampling_level: str = "token"  # token | sequence
    num_iterations: int = num(1, gt=0)
    mask_truncated_completions: bool = False
    kl: KLConfig = field(default_factory=KLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)


CHOICES = {
    "loss_type": LOSS_TYPES,
    "scale_rewards": ("group", "batch", "none"),
    "importance_sampling_level": IS_LEVELS,
    "kl.estimator": KL_ESTIMATORS,
    "generation.backend": tuple(ROLLOUT_BACKENDS),
    "generation.vllm_mode": ("colocate", "server"),
}


def validate_grpo(cfg: DictConfig) -> None:
    algo = cfg.algo
    check_choices(algo, CHOICES, prefix="algo.")
    global_batch = cfg.trainer.per_device_batch_size * cfg.trainer.grad_accum * cfg.hw.num_devices
    if global_batch % algo.num_generations:
        raise ConfigError(
            f"algo.num_generations={algo.num_generations} must divide the generation batch "
            f"(per_device_batch_size*grad_accum*devices={global_batch})"
        )
    rollout = ROLLOUT_BACKENDS[algo.generation.backend]
    if cfg.hw.device not in rollout.devices:
        others = [b for b, row in ROLLOUT_BACKENDS.items() if cfg.hw.device in row.devices]
        raise ConfigError(
            f"algo.generation.backend={rollout.name} ({rollout.summary}) does not run on hw.device={cfg.hw.device}; "
            f"one of {others}"
        )
    shards_weights = any(tag in (cfg.hw.accelerate_config or "") for tag in ("zero3", "fsdp"))
    if rollout.merged_copy and cfg.hw.num_devices > 1 and shards_weights:
        raise ConfigError(
            f"algo.generation.backend={rollout.name} keeps a whole copy of the policy per process, which "
            f"hw.accelerate_config={cfg.hw.accelerate_config} shards: use hf or vllm"
        )
    if algo.kl.beta_min > algo.kl.beta_max:
        raise ConfigError(f"algo.kl.beta_min={algo.kl.beta_min} must be <= algo.kl.beta_max={algo.kl.beta_max}")
    if algo.kl.target is not None and algo.beta == 0:
        raise ConfigError("algo.kl.target is set but algo.beta=0: adaptive beta needs a starting beta > 0")
    if algo.kl.estimator != "k3" and cfg.kernels.backend == TRL:
        raise ConfigError(
            f"algo.kl.estimator={algo.kl.estimator} needs a posttrain kernel (kernels=eager|fused|...): "
            "TRL's loss only has k3"
        )
