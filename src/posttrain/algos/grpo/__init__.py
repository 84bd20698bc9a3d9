"""GRPO on TRL's `GRPOTrainer`: config mapping, rewards, data, and the training entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from trl import GRPOConfig

from posttrain.algos.grpo.evaluate import evaluate
from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.rewards import reward_functions
from posttrain.launch import is_main_process
from posttrain.training_args import common_training_kwargs

__all__ = ["build_trainer", "evaluate", "grpo_args", "summarize"]


def grpo_args(cfg: DictConfig, run_dir: Path, reward_weights: list[float] | None = None) -> GRPOConfig:
    """`GRPOConfig` from the `trainer`, `hw` and `algo` groups."""
    algo = cfg.algo
    gen = algo.generation
    use_gc = bool(cfg.model.gradient_checkpointing or cfg.hw.gradient_checkpointing)
    kwargs: dict[str, Any] = common_training_kwargs(cfg, run_dir)
    kwargs.update(
        num_generations=algo.num_generations,
        max_completion_length=algo.max_completion_length,
        loss_type=algo.loss_type,
        beta=algo.beta,
        epsilon=algo.epsilon,
        epsilon_high=algo.epsilon_high,
        scale_rewards=algo.scale_rewards,
        importance_sampling_level=algo.importance_sampling_level,
        num_iterations=algo.num_iterations,
        mask_truncated_completions=algo.mask_truncated_completions,
        temperature=gen.temperature,
        top_p=gen.top_p,
        top_k=gen.top_k,
        use_vllm=gen.backend == "vllm",
        vllm_mode=gen.vllm_mode,
        vllm_gpu_memory_utilization=cfg.hw.vllm_gpu_memory_utilization,
        reward_weights=reward_weights,
        # log-probs in fp32 even when the model runs in bf16 (bf16 log-softmax drifts at 200k vocab)
        cast_lm_head_to_fp32=cfg.hw.precision != "fp32",
        # transformers 5 names (the gradient_checkpointing* aliases, which TRL defaults to True, warn on every run)
        activation_checkpointing=use_gc,
        activation_checkpointing_kwargs={"use_reentrant": False} if use_gc else None,
        use_liger_kernel=False,
        remove_unused_columns=False,
        log_completions=False,
    )
    return GRPOConfig(**kwargs)


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
    controller = (
        AdaptiveBeta(cfg.algo.beta, kl.target, kl.horizon, kl.beta_min, kl.beta_max) if kl.target else None
    )
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
    )
    trainer.heldout_before = heldout_before
    return trainer


def summarize(cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
    """Held-out greedy accuracy before and after training (when `data.heldout` > 0), for summary.json."""
    before = getattr(trainer, "heldout_before", None)
    if not cfg.data.heldout or before is None:
        return {}
    from posttrain.algos.grpo.heldout import heldout_accuracy

    after = heldout_accuracy(cfg, trainer.model, trainer.processing_class, run_dir, "after")
    return {
        "heldout_acc_before": before["acc"],
        "heldout_acc_after": after["acc"],
        "heldout_n": after["n"],
        "heldout_eval_s": round(before["seconds"] + after["seconds"], 2),
    }
