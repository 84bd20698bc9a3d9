"""`algo=grpo` schema (its defaults are THE defaults) and its cross-field rules, checked before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from posttrain.config.validate import ConfigError, check_choices, check_positive
from posttrain.kernels.registry import IS_LEVELS, KL_BIAS_CORRECTION, KL_ESTIMATORS, LOSS_TYPES, TRL


@dataclass
class KLConfig:
    estimator: str = "k3"  # k1 | k2 | k3 (TRL's loss has k3 only; k1/k2 need kernels=<backend>)
    # KL term times the importance ratio (TRL's use_bias_correction_kl and its default; DeepSeek-V3.2), every backend
    bias_correction: bool = KL_BIAS_CORRECTION
    target: float | None = None  # adaptive beta toward this per-token KL; null: fixed beta
    horizon: int | None = None  # steps; null: proportional rule (posttrain.algos.grpo.kl_control)
    beta_min: float = 1e-6
    beta_max: float = 10.0


@dataclass
class GenerationConfig:
    # hf: TRL's transformers generate on the policy | vllm | bf16_copy: on a merged bf16 copy (CPU, rollout_copy)
    backend: str = "hf"
    vllm_mode: str = "colocate"  # colocate | server
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class GRPOAlgoConfig:
    name: str = "grpo"
    num_generations: int = 8  # completions per prompt (one group); trainer.per_device_batch_size counts completions
    max_prompt_length: int = 256  # a guard: longer prompts are refused (TRL does not truncate)
    max_completion_length: int = 16
    loss_type: str = "grpo"  # grpo | bnpo | dr_grpo | dapo
    beta: float = 0.04  # KL coefficient (0: no reference model)
    epsilon: float = 0.2
    epsilon_high: float | None = None
    scale_rewards: str = "group"  # group | batch | none
    importance_sampling_level: str = "token"  # token | sequence
    num_iterations: int = 1
    mask_truncated_completions: bool = False
    kl: KLConfig = field(default_factory=KLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)


CHOICES = {
    "loss_type": LOSS_TYPES,
    "scale_rewards": ("group", "batch", "none"),
    "importance_sampling_level": IS_LEVELS,
    "kl.estimator": KL_ESTIMATORS,
    "generation.backend": ("hf", "vllm", "bf16_copy"),
    "generation.vllm_mode": ("colocate", "server"),
}


def validate_grpo(cfg: DictConfig) -> None:
    algo = cfg.algo
    check_choices(algo, CHOICES, prefix="algo.")
    check_positive(cfg, ("algo.num_generations", "algo.max_completion_length", "algo.max_prompt_length"))
    check_positive(cfg, ("algo.beta",), strict=False)
    if algo.num_generations < 2:
        raise ConfigError(f"algo.num_generations={algo.num_generations} must be >= 2 (advantages are per group)")
    global_batch = cfg.trainer.per_device_batch_size * cfg.trainer.grad_accum * cfg.hw.num_devices
    if global_batch % algo.num_generations:
        raise ConfigError(
            f"algo.num_generations={algo.num_generations} must divide the generation batch "
            f"(per_device_batch_size*grad_accum*devices={global_batch})"
        )
    if algo.generation.backend == "bf16_copy" and cfg.hw.device != "cpu":
        raise ConfigError(
            f"algo.generation.backend=bf16_copy is the CPU rollout copy; on hw.device={cfg.hw.device} use hf or vllm"
        )
    if algo.kl.target is not None and algo.kl.target <= 0:
        raise ConfigError(f"algo.kl.target={algo.kl.target} must be > 0 (or null to disable adaptive beta)")
    if algo.kl.target is not None and algo.beta == 0:
        raise ConfigError("algo.kl.target is set but algo.beta=0: adaptive beta needs a starting beta > 0")
    if algo.kl.estimator != "k3" and cfg.kernels.backend == TRL:
        raise ConfigError(
            f"algo.kl.estimator={algo.kl.estimator} needs a posttrain kernel (kernels=eager|fused|...): "
            "TRL's loss only has k3"
        )
