"""GRPO on TRL's `GRPOTrainer`: the `GRPOConfig` mapping and the trainer with its model, data and rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from trl import GRPOConfig

from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.rewards import reward_functions
from posttrain.dist import is_main_process
from posttrain.kernels.registry import BACKENDS
from posttrain.rollout import build_engine
from posttrain.training_args import common_training_kwargs

__all__ = ["LOSS_TYPE_FIELDS", "TRL_FIELDS", "build_trainer", "grpo_args"]


def grpo_args(cfg: DictConfig, run_dir: Path, reward_weights: list[float] | None = None) -> GRPOConfig:
    """`GRPOConfig` from the `trainer`, `hw` and `algo` groups."""
    algo = cfg.algo
    gen = algo.generation
    kwargs: dict[str, Any] = common_training_kwargs(cfg, run_dir)
    kwargs.update({name: algo[name] for name in TRL_FIELDS})  # TRL's names, meanings and defaults
    if gen.vllm_gpu_memory_utilization is not None:  # else GRPOConfig's own default
        kwargs["vllm_gpu_memory_utilization"] = gen.vllm_gpu_memory_utilization
    kwargs.update(
        num_generations=algo.num_generations,
        max_completion_length=algo.max_completion_length,
        use_bias_correction_kl=algo.kl.bias_correction,
        temperature=gen.temperature,
        top_p=gen.top_p,
        top_k=gen.top_k,
        min_p=gen.min_p,
        repetition_penalty=gen.repetition_penalty,
        # the policy is loaded with use_cache=False for training, which transformers' generate inherits: sampling
        # would recompute the whole sequence for every token (7x slower on one CPU core). vLLM takes no such key.
        generation_kwargs=None if gen.backend == "vllm" else {"use_cache": True},
        use_vllm=gen.backend == "vllm",
        vllm_mode=gen.vllm_mode,
        reward_weights=reward_weights,
        # log-probs in fp32 even when the model runs in bf16 (bf16 log-softmax drifts at 200k vocab). Backends with
        # `fp32_softmax` (fused, eager) do it themselves, so it is only asked for where TRL's own loss runs (for a
        # PEFT model with a tied head, where TRL's cast fails, the trainer applies it: policy_forward.fp32_fused_head).
        cast_lm_head_to_fp32=cfg.hw.precision != "fp32" and not _softmax_in_fp32(cfg.kernels.backend),
        use_liger_kernel=False,
        remove_unused_columns=False,
    )
    return GRPOConfig(**kwargs)


# GRPOConfig fields that parameterise TRL's loss types
LOSS_TYPE_FIELDS = (
    "delta",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
)
# `algo` fields that are GRPOConfig fields of the same name and meaning
TRL_FIELDS = (
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    *LOSS_TYPE_FIELDS,
    "off_policy_mask_threshold",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "entropy_coef_min",
    "entropy_coef_max",
    "entropy_coef_delta",
    "entropy_target",
    "scale_rewards",
    "multi_objective_aggregation",
    "importance_sampling_level",
    "num_iterations",
    "steps_per_generation",
    "mask_truncated_completions",
    "sync_ref_model",
    "ref_model_mixup_alpha",
    "ref_model_sync_steps",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "log_completions",
)


def _softmax_in_fp32(backend: str) -> bool:
    return backend in BACKENDS and BACKENDS[backend].fp32_softmax


def _reference_for_full_finetuning(cfg: DictConfig, model: Any, run_dir: Path) -> None:
    """TRL loads the frozen reference of a fully fine-tuned model from `config._name_or_path`. A tiny random-init
    model has no hub id, so its initial weights are saved in the run dir and the reference loads from there."""
    if not cfg.model.tiny or cfg.model.lora.enabled or cfg.algo.beta == 0:
        return
    init_dir = run_dir / "init_model"
    model.save_pretrained(init_dir)
    model.config._name_or_path = str(init_dir)


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list | None = None):
    """Model, data, rewards and `PosttrainGRPOTrainer`, ready to `.train()`."""
    from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer
    from posttrain.data import build_grpo_dataset
    from posttrain.models import load

    funcs, weights = reward_functions(cfg.data)
    if cfg.algo.generation.backend == "vllm":
        from posttrain.algos.grpo.vllm import require_vllm

        require_vllm()
    if cfg.data.heldout:
        from posttrain.algos.grpo.heldout import heldout_checker

        heldout_checker(cfg.data)  # a missing checker fails before the model loads
    model, tokenizer = load(cfg)
    _reference_for_full_finetuning(cfg, model, run_dir)
    dataset = build_grpo_dataset(cfg.data, tokenizer, cfg.algo.max_prompt_length)
    heldout_before = None
    if cfg.data.heldout and is_main_process():  # the untrained model (LoRA starts at zero)
        from posttrain.algos.grpo.heldout import heldout_accuracy

        heldout_before = heldout_accuracy(cfg, model, tokenizer, run_dir, "before")
    kl = cfg.algo.kl
    controller = AdaptiveBeta(cfg.algo.beta, kl.target, kl.horizon, kl.beta_min, kl.beta_max) if kl.target else None
    trainer = PosttrainGRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=grpo_args(cfg, run_dir, weights),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        kernel_backend=cfg.kernels.backend,
        kl_estimator=kl.estimator,
        kl_controller=controller,
        reward_hist_default=cfg.data.name,
        dynamic_sampling_rounds=cfg.algo.dynamic_sampling.max_rounds if cfg.algo.dynamic_sampling.enabled else 0,
        dynamic_sampling_refill_groups=cfg.algo.dynamic_sampling.refill_groups,
        sampler_correction=cfg.algo.sampler_correction,
        share_prompts=cfg.algo.share_prompts,
        loraplus_lr_ratio=cfg.model.lora.loraplus_lr_ratio if cfg.model.lora.enabled else None,
    )
    # after the trainer placed the policy on its device: the copy lands there too
    trainer.attach_rollout(
        build_engine(
            cfg,
            model,
            trainer.generation_config,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_ids=trainer.eos_token_ids,
            pad_to_multiple_of=trainer.pad_to_multiple_of,  # GRPOConfig resolved "auto" to None or an int
        )
    )
    trainer.heldout_before = heldout_before
    return trainer
