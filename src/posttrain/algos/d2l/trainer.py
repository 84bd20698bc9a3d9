"""HF `Trainer` for the D2L hypernet. The override surface, each small:

1. `compute_loss`: `losses.d2l_loss` (CE on answer tokens, each weighing the same whatever the process, optional
   top-k KL to the in-context teacher, L1 on the generated A/B, optional locality KL) with the shared non-finite
   guard; `ce_loss`, `kl_loss`, `locality_loss`, `gen_lora_l1_norm` are averaged over the logging window and added to
   the logs (HF adds `loss` and `grad_norm` — the hypernet's, the base is frozen).
2. `_save` / `_load_from_checkpoint`: a checkpoint's model part is the hypernet only (`hypernet.safetensors` +
   `hypernet_config.json`); optimizer, scheduler and RNG state are HF's own files, so `resume=auto` works.
   Checkpoints are written atomically (`posttrain.checkpoints.AtomicCheckpointMixin`).
3. `__init__`: with `teacher=` (kl_coef > 0), the in-context teacher's top-k cache is attached to the training
   rows *after* HF has placed the model (`Trainer.__init__` moves it to `args.device`), so the teacher computes
   on the device, in the dtype and under the autocast that training uses; the main process computes and saves
   it, the others load it.
4. `prediction_step` / `evaluate`: the document-dependence monitor (`posttrain.algos.d2l.monitor`, with
   `algo.monitor_steps`): HF's evaluation loop over the monitor's datasets, answer CE only (the held-out rows have no
   teacher), then the own-vs-other-document gaps logged beside HF's per-dataset losses.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import Trainer

from posttrain.algos.d2l.loss import answer_logits, answer_token_weight, d2l_loss
from posttrain.algos.d2l.monitor import gaps
from posttrain.callbacks.loss_terms import LossTermsMixin
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.guards import check_finite_loss


class D2LTrainer(LossTermsMixin, AtomicCheckpointMixin, Trainer):
    def __init__(
        self,
        *args: Any,
        ce_coef: float = 1.0,
        kl_coef: float = 0.0,
        l1_coef: float = 0.0,
        kl_temperature: float = 1.0,
        locality_coef: float = 0.0,
        teacher: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.coefs = {
            "ce_coef": ce_coef,
            "kl_coef": kl_coef,
            "l1_coef": l1_coef,
            "kl_temperature": kl_temperature,
            "locality_coef": locality_coef,
        }
        if teacher is not None:  # `attach_teacher` keyword arguments (k, temperature, cache_dir, key_parts)
            from posttrain.algos.d2l.teacher import attach_teacher

            # in the precision the student trains in: the trainer's autocast covers the model's forward only
            with self.args.main_process_first(local=False, desc="teacher top-k cache"), self.accelerator.autocast():
                attach_teacher(self.model, self.train_dataset.rows, **teacher)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, stats = d2l_loss(model, inputs, **self.coefs, token_weight=answer_token_weight(inputs))
        check_finite_loss(loss, self.state.global_step + 1)
        self.record_terms(stats)
        return (loss, None) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            logits, targets, _ = answer_logits(model, inputs)
            loss = F.cross_entropy(logits.float(), targets)
        return loss.detach(), None, None

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        extra = gaps(metrics, metric_key_prefix)  # empty in HF's inner call per dataset
        if extra:
            metrics.update(extra)
            self.log({k: v for k, v in metrics.items() if k.endswith(("_loss", "_gap"))})
        return metrics

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        self.accelerator.unwrap_model(self.model).save_hypernet(output_dir or self.args.output_dir, state_dict)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        if self.is_fsdp_enabled:  # sharded parameters: HF loads the sharded state the checkpoint holds
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.accelerator.unwrap_model(model or self.model).load_hypernet(resume_from_checkpoint)
