"""The two trainers `python -m posttrain.bench grpo_step` compares, built the same way: plain `trl.GRPOTrainer` with
posttrain's data, rewards and recipe keys (the anchor), and posttrain's own GRPO trainer; and the speed-relevant
settings each actually runs with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# TrainingArguments keys that define what GRPO learns, copied from posttrain's mapping into the anchor's GRPOConfig
# (with every `algo.trl` field)
RECIPE_KEYS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "reward_weights",
    "seed",
    "data_seed",
    "max_steps",
)


def anchor_trainer(cfg, run_dir: Path, callbacks: list | None = None):
    """Plain `trl.GRPOTrainer`: posttrain's data, rewards and tokenizer, the recipe's GRPOConfig keys, TRL defaults."""
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.algos.grpo.build import grpo_args
    from posttrain.algos.grpo.rewards import reward_functions
    from posttrain.algos.grpo.trl_fields import trl_kwargs
    from posttrain.data import build_grpo_dataset
    from posttrain.models import load
    from posttrain.models.loader import checkpoint_location
    from posttrain.models.lora import lora_config

    funcs: Any
    funcs, weights = reward_functions(cfg)
    model: Any
    model, tokenizer = load(cfg, with_lora=False)  # the tokenizer (chat template) posttrain trains with
    if not cfg.model.tiny:
        del model
        model = checkpoint_location(cfg.model)  # TRL loads it itself (its default: fp32)
    else:  # as a checkpoint on disk carries it (posttrain builds for training: cache off); TRL generates with it
        model.config.use_cache = True
    ours = grpo_args(cfg, run_dir, weights).to_dict()
    recipe = {k: ours[k] for k in RECIPE_KEYS} | trl_kwargs(cfg.algo)  # every field passed through
    # `use_cpu` where TRL's bf16 default needs it to start at all (its error message says so)
    import torch

    args = GRPOConfig(
        output_dir=str(run_dir / "checkpoints"),
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        logging_steps=1,  # the per-step reward curve (TRL's default logs every 10th step)
        use_cpu=not torch.cuda.is_available(),
        **recipe,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=build_grpo_dataset(cfg.data, tokenizer, cfg.algo.max_prompt_length),
        processing_class=tokenizer,
        peft_config=lora_config(cfg.model) if cfg.model.lora.enabled else None,
        callbacks=callbacks,
    )


def posttrain_trainer(cfg, run_dir: Path, callbacks: list | None = None):
    from posttrain.algos.registry import get_algorithm

    return get_algorithm(cfg.algo.name).build_trainer(cfg, run_dir, callbacks or [])


def build(path: str, cfg, run_dir: Path, callbacks: list | None = None):
    """The `path` trainer, with posttrain's metrics callback (`run_dir/metrics.jsonl`) first, as `train.py` has."""
    import transformers

    from posttrain.callbacks import JsonlMetricsCallback

    transformers.set_seed(cfg.seed)  # as posttrain.run.train does, for both
    callbacks = [JsonlMetricsCallback(run_dir / "metrics.jsonl"), *(callbacks or [])]
    return (anchor_trainer if path == "trl" else posttrain_trainer)(cfg, run_dir, callbacks)


def knobs(trainer) -> dict[str, Any]:
    """The speed-relevant settings a trainer actually runs with (read back from it, not from the config)."""
    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    return {
        "param_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "autocast": str(trainer.accelerator.mixed_precision),
        "gradient_checkpointing": bool(trainer.args.gradient_checkpointing),
        "kernels": getattr(trainer, "kernel_backend", "trl"),
        "optim": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
        "attn": model.config._attn_implementation,
        "threads": torch.get_num_threads(),
    }
