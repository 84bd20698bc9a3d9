"""GRPO on TRL's `GRPOTrainer`: the `GRPOConfig` mapping and the trainer with its model, data and rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from trl import GRPOConfig

from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.rewards import reward_functions
from posttrain.algos.grpo.trl_fields import trl_kwargs
from posttrain.dist import is_main_process
from posttrain.errors import ConfigError
from posttrain.kernels.registry import BACKENDS
from posttrain.rollout import build_engine
from posttrain.training_args import common_training_kwargs

__all__ = ["build_trainer", "grpo_args"]


def grpo_args(cfg: DictConfig, run_dir: Path, reward_weights: list[float] | None = None) -> GRPOConfig:
    """`GRPOConfig` from the `trainer` and `hw` groups, `algo.trl` (TRL's own fields, passed through) and the fields
    posttrain derives (`trl_fields.SET_BY_POSTTRAIN`). GRPOConfig's own checks fail in one line (ConfigError)."""
    kwargs: dict[str, Any] = common_training_kwargs(cfg, run_dir)
    kwargs.update(trl_kwargs(cfg.algo))
    kwargs.update(
        # the policy is loaded with use_cache=False for training, which transformers' generate inherits: sampling
        # would recompute the whole sequence for every token (7x slower on one CPU core). vLLM takes no such key.
        generation_kwargs=None if cfg.algo.generation.backend == "vllm" else {"use_cache": True},
        use_vllm=cfg.algo.generation.backend == "vllm",
        reward_weights=reward_weights,
        # log-probs in fp32 even when the model runs in bf16 (bf16 log-softmax drifts at 200k vocab). Backends with
        # `fp32_softmax` (fused, eager) do it themselves, so it is only asked for where TRL's own loss runs (for a
        # PEFT model with a tied head, where TRL's cast fails, the trainer applies it: policy_forward.fp32_fused_head).
        cast_lm_head_to_fp32=cfg.hw.precision != "fp32" and not _softmax_in_fp32(cfg.kernels.backend),
        use_liger_kernel=False,
        remove_unused_columns=False,
    )
    try:
        return GRPOConfig(**kwargs)
    except ValueError as ex:
        first = str(ex).strip().splitlines()[0]
        raise ConfigError(f"algo.trl: TRL's GRPOConfig refuses these values: {first}") from None


def _softmax_in_fp32(backend: str) -> bool:
    return backend in BACKENDS and BACKENDS[backend].fp32_softmax


def _reference_for_full_finetuning(cfg: DictConfig, model: Any, run_dir: Path) -> None:
    """TRL loads the frozen reference of a fully fine-tuned model from `config._name_or_path`. A tiny random-init
    model has no hub id, so its initial weights are saved in the run dir and the reference loads from there."""
    if not cfg.model.tiny or cfg.model.lora.enabled or cfg.algo.trl.beta == 0:
        return
    from accelerate import PartialState

    init_dir = run_dir / "init_model"
    state = PartialState(cpu=cfg.hw.device == "cpu")
    if state.is_main_process:  # one writer; the other ranks read it after the barrier
        model.save_pretrained(init_dir)
    state.wait_for_everyone()
    model.config._name_or_path = str(init_dir)


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list | None = None):
    """Model, data, rewards and `PosttrainGRPOTrainer`, ready to `.train()`."""
    from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer
    from posttrain.data import build_grpo_dataset
    from posttrain.models import load

    funcs, weights = reward_functions(cfg)
    args = grpo_args(cfg, run_dir, weights)  # GRPOConfig's checks, before the model loads
    if cfg.algo.generation.backend == "vllm":
        from posttrain.algos.grpo.vllm import require_vllm

        require_vllm()
    if cfg.algo.heldout:
        from posttrain.algos.grpo.heldout import heldout_checker

        heldout_checker(cfg.algo)  # a missing checker fails before the model loads
    model, tokenizer = load(cfg)
    _reference_for_full_finetuning(cfg, model, run_dir)
    dataset = build_grpo_dataset(cfg.data, tokenizer, cfg.algo.max_prompt_length)
    heldout_before = None
    if cfg.algo.heldout and is_main_process():  # the untrained model (LoRA starts at zero)
        from posttrain.algos.grpo.heldout import heldout_accuracy

        heldout_before = heldout_accuracy(cfg, model, tokenizer, run_dir, "before")
    kl = cfg.algo.kl
    controller = AdaptiveBeta(cfg.algo.trl.beta, kl.target, kl.horizon, kl.beta_min, kl.beta_max) if kl.target else None
    trainer = PosttrainGRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
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
        base_model=cfg.model.get("hub_id"),
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
