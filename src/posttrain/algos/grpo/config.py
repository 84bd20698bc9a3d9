"""`algo=grpo` schema (its defaults are THE defaults) and its cross-field rules, checked before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.grpo.trl_fields import trl_schema
from posttrain.config.ranges import free, num
from posttrain.config.validate import ConfigError, check_choices
from posttrain.kernels.registry import (
    IS_LEVELS,
    KL_ESTIMATORS,
    LOSS_TYPES,
    SAMPLING_IS_MODES,
    refusal,
)
from posttrain.rollout import BACKENDS as ROLLOUT_BACKENDS
from posttrain.rollout import SAMPLERS


@dataclass
class KLConfig:
    # k1 | k2 | k3 (TRL's loss has k3; k1/k2 are added over it: algos/grpo/kl_estimators.py); the coefficient is
    # algo.trl.beta, the importance-ratio factor algo.trl.use_bias_correction_kl
    estimator: str = "k3"
    # adaptive beta toward this per-token KL; null: fixed beta
    target: float | None = num(None, gt=0, note="or null: fixed beta")
    horizon: int | None = num(None, gt=0)  # steps; null: proportional rule (posttrain.algos.grpo.kl_control)
    beta_min: float = num(1e-6, ge=0)
    beta_max: float = num(10.0, gt=0)


@dataclass
class GenerationConfig:
    # the rollout engine (posttrain.rollout): hf (TRL's generate on the policy) | bf16_copy (merged bf16 copy, CPU) |
    # static (merged copy, static KV cache, compiled decode) | vllm (TRL's vLLM: algo.trl.vllm_mode and the other
    # algo.trl.vllm_* fields). The sampling parameters are TRL's: algo.trl.temperature, top_p, top_k, min_p, ...
    backend: str = "hf"
    compile: bool | None = None  # static: compile the decode step (null: on CUDA only, where it is CUDA graphs)
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


TRLGRPOConfig = trl_schema()


@dataclass
class GRPOAlgoConfig:
    name: str = "grpo"
    # TRL's GRPOConfig fields, with TRL's names, types and defaults (posttrain.algos.grpo.trl_fields): the loss type
    # and its knobs, beta, the group size (num_generations; trainer.per_device_batch_size counts completions),
    # sampling, vLLM. GRPOConfig validates them.
    trl: TRLGRPOConfig = field(default_factory=TRLGRPOConfig)  # type: ignore[valid-type]
    max_prompt_length: int = num(256, gt=0)  # a guard: longer prompts are refused (TRL does not truncate)
    # The task's verifiable rewards: [{name, weight, kwargs}] resolved by posttrain.rewards.build; each GRPO task in
    # conf/data/ sets its own.
    rewards: list[dict[str, Any]] = free([], "names, weights and kwargs, checked by posttrain.rewards.build")
    # held-out problems scored by greedy decoding before and after training with the `math` reward's answer checker
    # (summary: heldout_acc_before/after); 0 turns it off. Needs an `answer` column and a test split (data=add: 200).
    heldout: int = num(0, ge=0)
    # the first held-out problem scored: problems heldout_start .. heldout_start + heldout - 1 of the test split
    # (data=add has 500; 0-199 served model selection, 200-499 are the untouched test split: issue 62)
    heldout_start: int = num(0, ge=0)
    heldout_batch_size: int = num(50, gt=0)
    # the vLLM importance-sampling correction (algo.trl.vllm_importance_sampling_*) for a merged rollout copy
    # (generation.backend bf16_copy | static): an extra policy pass per generation batch (algos/grpo/sampler_mismatch)
    sampler_correction: bool = False
    # each distinct prompt computed once per batch (posttrain.models.shared_prompt): the rollout copy's prefill
    # (generation.backend=bf16_copy) and the learner's forward on the kernel path (kernels != trl; not under
    # gradient checkpointing, FSDP or DeepSpeed). make train (4 prompts x 4): 0.74x the step time, same loss and grads
    share_prompts: bool = True
    kl: KLConfig = field(default_factory=KLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)


# the choices posttrain branches on, refused at compose time (TRL checks its others when GRPOConfig is built)
CHOICES = {
    "trl.loss_type": LOSS_TYPES,
    "trl.scale_rewards": ("group", "batch", "none"),
    "trl.multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "trl.vllm_importance_sampling_mode": SAMPLING_IS_MODES,
    "trl.importance_sampling_level": IS_LEVELS,
    "trl.vllm_mode": ("colocate", "server"),
    "kl.estimator": KL_ESTIMATORS,
    "generation.backend": tuple(ROLLOUT_BACKENDS),
    "generation.sampler": SAMPLERS,
}


def validate_grpo(cfg: DictConfig) -> None:
    algo, trl = cfg.algo, cfg.algo.trl
    check_choices(algo, CHOICES, prefix="algo.")
    if trl.generation_batch_size is None:  # else GRPOConfig checks it against the processes it sees
        steps = trl.steps_per_generation or cfg.trainer.grad_accum
        global_batch = cfg.trainer.per_device_batch_size * steps * cfg.hw.num_devices
        if global_batch % trl.num_generations:
            steps_name = "algo.trl.steps_per_generation" if trl.steps_per_generation else "grad_accum"
            raise ConfigError(
                f"algo.trl.num_generations={trl.num_generations} must divide the generation batch "
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
        hint = (
            "algo.trl.vllm_importance_sampling_correction"
            if rollout.name == "vllm"
            else "bf16_copy, static or static_policy"
        )
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
    if algo.kl.target is not None and trl.beta == 0:
        raise ConfigError("algo.kl.target is set but algo.trl.beta=0: adaptive beta needs a starting beta > 0")
    _validate_loss_knobs(cfg)


def kernel_refusal(cfg: DictConfig, backend: str) -> str | None:
    """Why kernel `backend` cannot give TRL's loss what this config needs (None if it can): `registry.refusal`."""
    trl = cfg.algo.trl
    return refusal(
        backend,
        top_entropy_quantile=trl.top_entropy_quantile,
        entropy_bonus=trl.entropy_coef != 0 or trl.use_adaptive_entropy,
    )


def check_kernel(cfg: DictConfig) -> None:
    """ConfigError in one line when `cfg.kernels.backend` cannot compute this config's loss."""
    why = kernel_refusal(cfg, cfg.kernels.backend)
    if why:
        raise ConfigError(f"kernels={cfg.kernels.backend}: {why}")


def _validate_loss_knobs(cfg: DictConfig) -> None:
    """What the kernel backend cannot compute (`registry.refusal`), and TRL's rules that TRL checks only when the
    trainer is built (those of GRPOConfig.__post_init__ are GRPOConfig's: `build.grpo_args`)."""
    trl = cfg.algo.trl
    vllm_is = cfg.algo.generation.backend == "vllm" and trl.vllm_importance_sampling_correction
    check_kernel(cfg)  # the command line's kernel (or trl); a device default is checked by GRPO.apply_hardware
    if trl.entropy_coef_min > trl.entropy_coef_max:
        raise ConfigError(
            f"algo.trl.entropy_coef_min={trl.entropy_coef_min} must be <= "
            f"algo.trl.entropy_coef_max={trl.entropy_coef_max}"
        )
    mode = trl.vllm_importance_sampling_mode
    if trl.loss_type == "vespo" and vllm_is and not mode.startswith("token"):
        raise ConfigError(
            f"algo.trl.loss_type=vespo with vLLM needs a token_* algo.trl.vllm_importance_sampling_mode, not {mode}"
        )
    if trl.sync_ref_model and (trl.beta == 0 or cfg.model.lora.enabled):
        raise ConfigError(
            "algo.trl.sync_ref_model=true needs a reference model of its own: algo.trl.beta > 0 and "
            "model.lora.enabled=false (TRL cannot sync a LoRA policy's reference)"
        )
