"""`algo=grpo` schema (its defaults are THE defaults) and its cross-field rules, checked before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from posttrain.config.ranges import num
from posttrain.config.validate import ConfigError, check_choices
from posttrain.kernels.registry import (
    IS_LEVELS,
    KL_BIAS_CORRECTION,
    KL_ESTIMATORS,
    LOSS_TYPES,
    SAMPLING_IS_MODES,
    refusal,
)
from posttrain.rollout import BACKENDS as ROLLOUT_BACKENDS
from posttrain.rollout import SAMPLERS


@dataclass
class KLConfig:
    estimator: str = "k3"  # k1 | k2 | k3 (TRL's loss has k3; k1/k2 are added over it: algos/grpo/kl_estimators.py)
    # KL term times the importance ratio (TRL's use_bias_correction_kl and its default; DeepSeek-V3.2)
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
    # share of device memory a colocated vLLM reserves (vLLM: (0, 1]); null: the device's (device_defaults: 0.3)
    vllm_gpu_memory_utilization: float | None = num(None, gt=0, le=1)
    compile: bool | None = None  # static: compile the decode step (null: on CUDA only, where it is CUDA graphs)
    temperature: float = num(1.0, gt=0)  # transformers GenerationConfig; TRL divides logits by it
    top_p: float = num(1.0, gt=0, le=1)  # TRL GRPOConfig, vLLM SamplingParams
    top_k: int = num(0, ge=0, note="0: off")
    min_p: float | None = num(None, ge=0, le=1, note="or null: off")  # scaled by the top token's probability
    repetition_penalty: float = num(1.0, gt=0, note="1: off")  # > 1 favours new tokens
    # how a merged copy (bf16_copy | static) draws each token: multinomial (transformers' torch.multinomial) |
    # inverse_cdf (one uniform per row: the same distribution, another random stream; ~20 ms less per decode step of
    # 16 rows on a 2-core CPU, posttrain.rollout.inverse_cdf)
    sampler: str = "multinomial"


@dataclass
class DynamicSamplingConfig:
    # DAPO: replace groups whose rewards are all equal (zero advantages) by freshly generated ones (one process only)
    enabled: bool = False
    max_rounds: int = num(4, ge=1, note="extra generation batches per step at most")
    # prompts (groups) per extra batch (DAPO's gen_prompt_bsz); null: the step's own group count. One larger
    # batch costs far less than several small ones where decoding is bound by reading the weights (small GPU
    # batches; not make train's CPU, experiments/grpo_objectives); informative groups beyond the step's count are
    # discarded, as in DAPO
    refill_groups: int | None = num(None, ge=1)


@dataclass
class GRPOAlgoConfig:
    name: str = "grpo"
    # completions per prompt (one group); trainer.per_device_batch_size counts completions
    num_generations: int = num(8, ge=2, note="advantages are per group")
    max_prompt_length: int = num(256, gt=0)  # a guard: longer prompts are refused (TRL does not truncate)
    max_completion_length: int = num(16, gt=0)
    # grpo | bnpo | dr_grpo | dapo | cispo | sapo | luspo | vespo (posttrain.kernels.registry.LOSSES). grpo, not TRL's
    # dapo: on the make-train preset (on-policy, where the types differ only in normalisation: sapo's gradient is
    # grpo's, cispo's dapo's) dapo - grpo was +0.06 [-0.46, +0.58] held-out over 3 seeds, no reason to change the
    # loss the preset's 5-seed robustness was measured with (experiments/grpo_objectives)
    loss_type: str = "grpo"
    beta: float = num(0.04, ge=0)  # KL coefficient (0: no reference model)
    epsilon: float = num(0.2, ge=0)  # clip range [1 - epsilon, 1 + epsilon_high]
    epsilon_high: float | None = num(None, ge=0)  # null: epsilon (cispo: the cap of its ratio, ScaleRL uses 5)
    # The rest are TRL 1.16 GRPOConfig's knobs, with its names, meanings and defaults.
    delta: float | None = num(None, gt=0, note="or null: off")  # two-sided clip: ratio capped at delta (INTELLECT-2)
    sapo_temperature_pos: float = num(1.0, gt=0)  # sapo's gate temperature for positive advantages
    sapo_temperature_neg: float = num(1.05, gt=0)  # ... and for the others
    vespo_k_pos: float = num(2.0, ge=0)  # vespo's gamma weight w^k e^(-lambda w), advantage >= 0
    vespo_lambda_pos: float = num(3.0, ge=0)
    vespo_k_neg: float = num(3.0, ge=0)  # ... advantage < 0
    vespo_lambda_neg: float = num(2.0, ge=0)
    # drop sequences with negative advantage whose mean log(pi_sampler / pi) exceeds it (DeepSeek-V3.2)
    off_policy_mask_threshold: float | None = num(None, gt=0, note="or null: off")
    top_entropy_quantile: float = num(1.0, ge=0, le=1)  # policy loss on the top quantile of tokens by entropy
    entropy_coef: float = num(0.0, note="0: off")  # minus coef x mean token entropy, on every loss type
    use_adaptive_entropy: bool = False  # Skywork-OR1: coef += delta below entropy_target, -= above
    entropy_coef_min: float = num(0.0, ge=0)
    entropy_coef_max: float = num(1.0, ge=0)
    entropy_coef_delta: float = num(0.005, ge=0)
    entropy_target: float = num(0.2, ge=0)  # nats per token; the bonus only applies at or below it
    scale_rewards: str = "group"  # group | batch | none
    multi_objective_aggregation: str = "sum_then_normalize"  # sum_then_normalize | normalize_then_sum (GDPO)
    importance_sampling_level: str = "token"  # token | sequence
    num_iterations: int = num(1, gt=0)
    steps_per_generation: int | None = num(None, gt=0, note="or null: trainer.grad_accum")  # micro-batches/rollout
    mask_truncated_completions: bool = False
    sync_ref_model: bool = False  # TR-DPO: ref <- alpha * policy + (1 - alpha) * ref every ref_model_sync_steps
    ref_model_mixup_alpha: float = num(0.6, ge=0, le=1)
    ref_model_sync_steps: int = num(512, gt=0)
    # vLLM rollouts: the policy term times pi_old / pi_vllm, per token or sequence, truncated or masked to [min, max]
    vllm_importance_sampling_correction: bool = True
    # the same correction for a merged rollout copy (generation.backend bf16_copy | static), with the mode and
    # bounds below: an extra policy pass per generation batch (posttrain.algos.grpo.sampler_mismatch)
    sampler_correction: bool = False
    vllm_importance_sampling_mode: str = "sequence_mask"  # token_truncate | token_mask | sequence_truncate | ..._mask
    vllm_importance_sampling_clip_min: float | None = num(None, ge=0, note="or null: no lower bound")
    vllm_importance_sampling_clip_max: float | None = num(3.0, gt=0, note="or null: no upper bound")
    # each distinct prompt computed once per batch (posttrain.models.shared_prompt): the rollout copy's prefill
    # (generation.backend=bf16_copy) and the learner's forward on the kernel path (kernels != trl; not under
    # gradient checkpointing, FSDP or DeepSpeed). make train (4 prompts x 4): 0.74x the step time, same loss and grads
    share_prompts: bool = True
    log_completions: bool = False  # print a sample of prompts and completions every logging step (rich; wandb)
    kl: KLConfig = field(default_factory=KLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)


CHOICES = {
    "loss_type": LOSS_TYPES,
    "scale_rewards": ("group", "batch", "none"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_importance_sampling_mode": SAMPLING_IS_MODES,
    "importance_sampling_level": IS_LEVELS,
    "kl.estimator": KL_ESTIMATORS,
    "generation.backend": tuple(ROLLOUT_BACKENDS),
    "generation.vllm_mode": ("colocate", "server"),
    "generation.sampler": SAMPLERS,
}


def validate_grpo(cfg: DictConfig) -> None:
    algo = cfg.algo
    check_choices(algo, CHOICES, prefix="algo.")
    steps = algo.steps_per_generation or cfg.trainer.grad_accum
    global_batch = cfg.trainer.per_device_batch_size * steps * cfg.hw.num_devices
    if global_batch % algo.num_generations:
        steps_name = "algo.steps_per_generation" if algo.steps_per_generation else "grad_accum"
        raise ConfigError(
            f"algo.num_generations={algo.num_generations} must divide the generation batch "
            f"(per_device_batch_size*{steps_name}*devices={global_batch})"
        )
    rollout = ROLLOUT_BACKENDS[algo.generation.backend]
    if cfg.hw.device not in rollout.devices:
        others = [b for b, row in ROLLOUT_BACKENDS.items() if cfg.hw.device in row.devices]
        raise ConfigError(
            f"algo.generation.backend={rollout.name} ({rollout.summary}) does not run on hw.device={cfg.hw.device}; "
            f"one of {others}"
        )
    shards_weights = any(tag in (cfg.hw.accelerate_config or "") for tag in ("zero3", "fsdp"))  # no torch here
    if rollout.engine and cfg.hw.num_devices > 1 and shards_weights:
        what = "keeps a whole copy of the policy per process" if rollout.merged_copy else "decodes from whole weights"
        raise ConfigError(
            f"algo.generation.backend={rollout.name} {what}, which hw.accelerate_config={cfg.hw.accelerate_config} "
            "shards: use hf (TRL gathers the weights for generation) or vllm"
        )
    if algo.sampler_correction and not rollout.engine:
        hint = "vllm_importance_sampling_correction" if rollout.name == "vllm" else "bf16_copy, static or static_policy"
        raise ConfigError(
            f"algo.sampler_correction=true corrects a posttrain rollout engine's samples; algo.generation.backend="
            f"{rollout.name} samples with {'vLLM' if rollout.name == 'vllm' else 'TRL'} (use {hint})"
        )
    if algo.generation.sampler != "multinomial" and rollout.name == "vllm":
        raise ConfigError(f"algo.generation.sampler={algo.generation.sampler} is a rollout copy's; vLLM samples itself")
    if algo.dynamic_sampling.enabled and cfg.hw.num_devices > 1:
        raise ConfigError("algo.dynamic_sampling.enabled=true runs on one process (hw.num_devices=1)")
    if algo.kl.beta_min > algo.kl.beta_max:
        raise ConfigError(f"algo.kl.beta_min={algo.kl.beta_min} must be <= algo.kl.beta_max={algo.kl.beta_max}")
    if algo.kl.target is not None and algo.beta == 0:
        raise ConfigError("algo.kl.target is set but algo.beta=0: adaptive beta needs a starting beta > 0")
    _validate_loss_knobs(cfg)


def kernel_refusal(cfg: DictConfig, backend: str) -> str | None:
    """Why kernel `backend` cannot give TRL's loss what this config needs (None if it can): `registry.refusal`."""
    algo = cfg.algo
    return refusal(
        backend,
        top_entropy_quantile=algo.top_entropy_quantile,
        entropy_bonus=algo.entropy_coef != 0 or algo.use_adaptive_entropy,
    )


def check_kernel(cfg: DictConfig) -> None:
    """ConfigError in one line when `cfg.kernels.backend` cannot compute this config's loss."""
    why = kernel_refusal(cfg, cfg.kernels.backend)
    if why:
        raise ConfigError(f"kernels={cfg.kernels.backend}: {why}")


def _validate_loss_knobs(cfg: DictConfig) -> None:
    """What the kernel backend cannot compute (`registry.refusal`), and TRL's own rules for its knobs (which TRL
    would raise only when the trainer is built, after the model loaded)."""
    algo = cfg.algo
    vllm_is = algo.generation.backend == "vllm" and algo.vllm_importance_sampling_correction
    check_kernel(cfg)  # the command line's kernel (or trl); a device default is checked by GRPO.apply_hardware
    if algo.entropy_coef_min > algo.entropy_coef_max:
        raise ConfigError(
            f"algo.entropy_coef_min={algo.entropy_coef_min} must be <= algo.entropy_coef_max={algo.entropy_coef_max}"
        )
    low, high = algo.vllm_importance_sampling_clip_min, algo.vllm_importance_sampling_clip_max
    if low is not None and high is not None and low >= high:
        raise ConfigError(
            f"algo.vllm_importance_sampling_clip_min={low} must be < algo.vllm_importance_sampling_clip_max={high}"
        )
    mode = algo.vllm_importance_sampling_mode
    if algo.vllm_importance_sampling_correction and mode.endswith("truncate") and low is None and high is None:
        raise ConfigError(f"algo.vllm_importance_sampling_mode={mode} needs a clip_min or clip_max")
    if algo.loss_type == "vespo" and vllm_is and not mode.startswith("token"):
        raise ConfigError(f"algo.loss_type=vespo with vLLM needs a token_* vllm_importance_sampling_mode, not {mode}")
    if algo.sync_ref_model and (algo.beta == 0 or cfg.model.lora.enabled):
        raise ConfigError(
            "algo.sync_ref_model=true needs a reference model of its own: algo.beta > 0 and model.lora.enabled=false "
            "(TRL cannot sync a LoRA policy's reference)"
        )
