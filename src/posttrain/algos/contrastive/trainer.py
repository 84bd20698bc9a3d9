"""HF `Trainer` for `algo=contrastive` (the SFT arms; `dpo.py` has the preference arms); the override surface, each
small:

1. `compute_loss`: ONE forward of the batch (benign | counterfactual | injected [| executed]) through
   `ContrastiveModel`, then `terms.loss_terms`: the representation term, output consistency and the shifted LM
   loss, weighted by `algo.contrastive_weight` / `algo.consistency_weight` / `algo.lm_weight`; a non-finite loss
   stops training (`check_finite_loss`). Per-term statistics are averaged per logging window and logged with the
   loss (metrics.jsonl).
2. `_save` / `_load_from_checkpoint` (`ContrastiveCheckpointMixin`): a checkpoint holds the LoRA adapters and the
   projection head (`checkpoint.py`); resuming loads both, strictly. Optimizer, scheduler, RNG, step and data
   position are HF Trainer's own resume machinery, which covers the head because it is part of the trained module.
   Checkpoints are written atomically (`posttrain.checkpoints.AtomicCheckpointMixin`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig
from transformers import Trainer

from posttrain.algos.contrastive.checkpoint import load_weights, save_weights
from posttrain.algos.contrastive.terms import loss_terms
from posttrain.callbacks.loss_terms import LossTermsMixin
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.guards import check_finite_loss
from posttrain.lora_plus import LoraPlusMixin

if TYPE_CHECKING:
    from transformers import Trainer as _TrainerBase

    from posttrain.algos.contrastive.model import ContrastiveModel
else:
    _TrainerBase = object


class ContrastiveCheckpointMixin(_TrainerBase):
    """Checkpoints of adapters + head for a Trainer whose `contrastive_module()` is the `ContrastiveModel`."""

    run_cfg: DictConfig

    def contrastive_module(self, model: torch.nn.Module | None = None) -> ContrastiveModel:
        return self.accelerator.unwrap_model(model if model is not None else self.model)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not self.args.should_save:
            return
        output_dir = output_dir or str(self.args.output_dir)
        save_weights(self.contrastive_module(), output_dir, self.run_cfg, state_dict)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        if getattr(self, "is_fsdp_enabled", False):  # sharded parameters: HF loads the sharded state it saved
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_weights(self.contrastive_module(model), resume_from_checkpoint, self.run_cfg)


class ContrastiveTrainer(ContrastiveCheckpointMixin, LossTermsMixin, AtomicCheckpointMixin, LoraPlusMixin, Trainer):
    def __init__(self, *args, run_cfg: DictConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_cfg = run_cfg
        self.loraplus_lr_ratio = run_cfg.model.lora.loraplus_lr_ratio

    def compute_loss(
        self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
    ):
        algo = self.run_cfg.algo
        out = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            pool_mask=inputs["pool_mask"],
            layer=algo.layer,
        )
        with self.accelerator.autocast():  # the LM head runs outside the model's forward: in the forward's precision
            loss, stats = loss_terms(
                out,
                inputs["labels"],
                self.contrastive_module(model).output_embeddings(),
                algo,
                across_processes=self.accelerator.num_processes > 1,
            )
        check_finite_loss(loss, self.state.global_step + 1)
        if model.training:
            self.record_terms(stats)
        return (loss, out) if return_outputs else loss
