"""Build a small PosttrainGRPOTrainer directly (custom data/rewards) for lesson tests."""

from __future__ import annotations

from pathlib import Path

import torch
from datasets import Dataset

from posttrain.algos.grpo.build import grpo_args
from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer
from posttrain.config.compose import load_config
from posttrain.models import load


def prompt_dependent_reward(prompts, completions, **kwargs):
    """Length plus a large per-prompt offset: group means differ, so batch-centring would show."""

    def offset(p) -> float:
        text = str(p)
        return 100.0 * ("sea" in text) + 10.0 * int(text.split("the ")[1].split()[1].rstrip("'}]"))

    return [float(len(str(c))) + offset(p) for p, c in zip(prompts, completions)]


def make_trainer(
    tmp_path: Path, *overrides: str, reward=prompt_dependent_reward, weights: list[float] | None = None
) -> PosttrainGRPOTrainer:
    """A trainer on 16 distinct prompts; `reward` is one reward function or a list (with `weights`)."""
    cfg = load_config(
        [
            "trainer.max_steps=1",
            "trainer.per_device_batch_size=8",
            "algo.trl.num_generations=4",
            "trainer.progress_bar=false",
            *overrides,
        ]
    )
    torch.manual_seed(0)
    model, tok = load(cfg)
    # every prompt distinct, so a group is identified by its prompt ids even after TRL shuffles the batch
    rewards = list(reward) if isinstance(reward, (list, tuple)) else [reward]
    rows = [{"prompt": [{"role": "user", "content": f"the {w} {i}"}]} for i in range(8) for w in ("sea", "sky")]
    trainer = PosttrainGRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=grpo_args(cfg, tmp_path, weights or [1.0] * len(rewards)),
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        kernel_backend=cfg.kernels.backend,
        kl_estimator=cfg.algo.kl.estimator,
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def first_batch(trainer: PosttrainGRPOTrainer) -> dict:
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer._prepare_inputs(batch)


def perturb_lora(model, scale: float = 0.5, seed: int = 1) -> None:
    """LoRA B starts at zero (policy == reference); move it so KL and ratios are non-trivial."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=gen) * scale)
