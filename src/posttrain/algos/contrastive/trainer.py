"""HF `Trainer` for `algo=contrastive`; the override surface, each small:

1. `compute_loss`: ONE forward of the 3B-row batch (benign | counterfactual | injected) through
   `ContrastiveModel`, InfoNCE on the projected pooled states + shifted LM loss on the answer tokens, weighted by
   `algo.contrastive_weight` / `algo.lm_weight`; a non-finite loss stops training (`check_finite_loss`).
   Per-term statistics are averaged per logging window and logged with the loss (metrics.jsonl).
2. `_save` / `_load_from_checkpoint`: a checkpoint holds the LoRA adapters and the projection head
   (`checkpoint.py`); resuming loads both, strictly. Optimizer, scheduler, RNG, step and data position are
   HF Trainer's own resume machinery, which covers the head because it is part of the trained module.
   Checkpoints are written atomically (`posttrain.checkpoints.AtomicCheckpointMixin`).
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig
from transformers import Trainer

from posttrain.algos.contrastive.checkpoint import load_weights, save_weights
from posttrain.algos.contrastive.loss import info_nce, lm_rows, shifted_lm_loss
from posttrain.callbacks.loss_terms import LossTermsMixin
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.guards import check_finite_loss


class ContrastiveTrainer(LossTermsMixin, AtomicCheckpointMixin, Trainer):
    def __init__(self, *args, run_cfg: DictConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_cfg = run_cfg

    def _unwrapped(self, model: torch.nn.Module | None = None) -> torch.nn.Module:
        return self.accelerator.unwrap_model(model if model is not None else self.model)

    def compute_loss(
        self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
    ):
        algo = self.run_cfg.algo
        out = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], pool_mask=inputs["pool_mask"]
        )
        nce, stats = info_nce(out.z, algo.temperature, algo.in_batch_negatives)
        rows = lm_rows(out.hidden.shape[0], algo.lm_on_counterfactual, out.hidden.device, algo.lm_on_injected)
        with self.accelerator.autocast():  # the LM head runs outside the model's forward: in the forward's precision
            lm = shifted_lm_loss(out.hidden[rows], inputs["labels"][rows], self._unwrapped(model).output_embeddings())
        loss = algo.contrastive_weight * nce + algo.lm_weight * lm
        check_finite_loss(loss, self.state.global_step + 1)
        if model.training:
            stats["lm_loss"] = float(lm.detach())
            self.record_terms(stats)
        return (loss, out) if return_outputs else loss

    # -- checkpoints: adapters + head --------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not self.args.should_save:
            return
        output_dir = output_dir or str(self.args.output_dir)
        save_weights(self._unwrapped(), output_dir, self.run_cfg)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        load_weights(self._unwrapped(model), resume_from_checkpoint, self.run_cfg)
