"""LoRA+ (Hayou et al. 2024, arXiv:2402.12354): the LoRA B matrices learn at `model.lora.loraplus_lr_ratio` times the
learning rate of the A matrices (`trainer.lr`).

B starts at zero, so early on the adapter's output moves with B's steps alone; a larger step for B than for A is what
the paper finds learns faster at the same stability. `LoraPlusMixin` (before the HF `Trainer` in a trainer's bases)
builds the optimizer with PEFT's `create_loraplus_optimizer`, from the optimizer class and arguments the trainer's own
`optim` choice gives (`Trainer.get_optimizer_cls_and_kwargs`), and leaves the learning-rate schedule to the trainer:
it scales every group's lr alike, so B keeps its ratio. Without a ratio the trainer builds its usual optimizer.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.optimizers import create_loraplus_optimizer
from transformers.trainer_optimizer import is_optimizer_factory

from posttrain.errors import ConfigError


class LoraPlusMixin:
    """`create_optimizer` with LoRA+ param groups when `loraplus_lr_ratio` is set."""

    loraplus_lr_ratio: float | None = None
    optimizer: Any
    model: Any
    args: Any

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        if self.loraplus_lr_ratio is None or self.optimizer is not None:
            return super().create_optimizer(model)  # type: ignore[misc]
        opt_model = self.model if model is None else model
        if not any("lora_B" in name for name, p in opt_model.named_parameters() if p.requires_grad):
            raise ConfigError("model.lora.loraplus_lr_ratio: the model has no trainable LoRA B matrices")
        optimizer_cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)  # type: ignore[attr-defined]
        if is_optimizer_factory(optimizer_cls) or {"params", "model", "optimizer_dict"} & set(kwargs):
            raise ConfigError(
                f"model.lora.loraplus_lr_ratio: optimizer {self.args.optim!r} builds its own parameter groups; "
                "LoRA+ needs a plain torch optimizer (adamw_torch, adamw_torch_fused, ...)"
            )
        kwargs = dict(kwargs)
        lr = kwargs.pop("lr", self.args.learning_rate)
        self.optimizer = create_loraplus_optimizer(
            opt_model,  # type: ignore[arg-type]  # any module with lora_A / lora_B parameters
            optimizer_cls,
            lr=lr,
            loraplus_lr_ratio=self.loraplus_lr_ratio,
            loraplus_weight_decay=self.args.weight_decay,
            **kwargs,
        )
        return self.optimizer
