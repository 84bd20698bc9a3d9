"""SecAlign-style preference optimisation on TRL's `DPOTrainer` (`algo.preference=dpo`), plus the representation terms.

Pairs: prompt = the injected prompt (the trusted request over data carrying the injection), chosen = the benign
answer, rejected = the answer to the injected task (`row["injected_answer"]`). TRL builds the PEFT model from the
base and `lora_config` (its reference is the base with the adapters disabled), tokenizes the pairs with the chat
template and computes the loss: `sigmoid` (DPO), plus its `sft` loss on the chosen reply weighted by
`algo.lm_weight` (0: SecAlign's DPO alone).

With the representation terms on (`algo.contrastive_weight` / `algo.consistency_weight` > 0) every pair also
carries its example's rows (benign | counterfactual | injected [| executed]), collated beside DPO's by
`PairsWithRows` under `ROWS_PREFIX`; `SecAlignDPOTrainer.compute_loss` takes them out, lets DPO compute its loss,
and adds `terms.loss_terms` (without the LM term: TRL's `sft` is it) from a second forward of those rows through
the same adapters. Override surface: `compute_loss`, and the checkpoint mixin (adapters + head). The head is a
fixed projection here (`algo.train_head=false`): DPO's optimizer holds the adapters only. On several processes the
rows' forward runs on the unwrapped model (no DDP gradient hook of its own): single-process runs only, for now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from omegaconf import DictConfig
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

from posttrain.algos.contrastive.model import ContrastiveModel, ProjectionHead
from posttrain.algos.contrastive.terms import loss_terms
from posttrain.algos.contrastive.trainer import ContrastiveCheckpointMixin
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.data.contrastive import TripletCollator, TripletDataset, layout_of, prompt_messages
from posttrain.guards import check_finite_loss
from posttrain.lora_plus import LoraPlusMixin
from posttrain.training_args import common_training_kwargs

ROWS_PREFIX = "rows_"  # batch keys of the representation terms' rows (TRL's collator keeps none of its own)


def preference_pairs(rows: list[dict[str, Any]], tokenizer: Any = None, layout: str = "one_turn") -> Dataset:
    """Conversational (prompt, chosen, rejected) pairs, with `row` (the index of the example in `rows`)."""
    return Dataset.from_list(
        [
            {
                "prompt": prompt_messages(r["injected"]["request"], r["injected"]["data"], tokenizer, layout),
                "chosen": [{"role": "assistant", "content": r["answer"]}],
                "rejected": [{"role": "assistant", "content": r["injected_answer"]}],
                "row": i,
            }
            for i, r in enumerate(rows)
        ]
    )


class PairsWithRows:
    """TRL's preference collator, plus (when `rows` is given) each pair's example rows under `ROWS_PREFIX`."""

    def __init__(self, pairs: DataCollatorForPreference, rows: TripletDataset | None, row_collator: TripletCollator):
        self.pairs, self.rows, self.row_collator = pairs, rows, row_collator

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.pairs(examples)
        if self.rows is not None:
            extra = self.row_collator([self.rows[int(e["row"])] for e in examples])
            batch.update({ROWS_PREFIX + k: v for k, v in extra.items()})
        return batch


class SecAlignDPOTrainer(ContrastiveCheckpointMixin, AtomicCheckpointMixin, LoraPlusMixin, DPOTrainer):
    def __init__(self, *args, run_cfg: DictConfig, head: ProjectionHead, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_cfg = run_cfg
        self.loraplus_lr_ratio = run_cfg.model.lora.loraplus_lr_ratio
        # the PEFT model TRL built, with the head: what the representation terms, checkpoints and evaluation read
        self._contrastive = ContrastiveModel(self.accelerator.unwrap_model(self.model), head, self.processing_class)

    def contrastive_module(self, model: torch.nn.Module | None = None) -> ContrastiveModel:
        return self._contrastive

    def compute_loss(self, model, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None):
        rows = {k[len(ROWS_PREFIX) :]: inputs.pop(k) for k in list(inputs) if k.startswith(ROWS_PREFIX)}
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = result[0] if return_outputs else result
        if rows:
            algo = self.run_cfg.algo
            out = self._contrastive(rows["input_ids"], rows["attention_mask"], rows["pool_mask"], layer=algo.layer)
            with self.accelerator.autocast():
                extra, stats = loss_terms(
                    out, rows["labels"], self._contrastive.output_embeddings(), algo, with_lm=False
                )
            loss = loss + extra
            mode = "train" if self.model.training else "eval"
            for key, value in stats.items():
                self._metrics[mode][key].append(value)
        check_finite_loss(loss, self.state.global_step + 1)
        return (loss, result[1]) if return_outputs else loss


def build_dpo_trainer(cfg: DictConfig, run_dir: Path, rows: list[dict], callbacks: list | None) -> SecAlignDPOTrainer:
    """Base model (TRL adds the LoRA adapters), pairs, the rows of the representation terms and the trainer."""
    from posttrain.algos.contrastive.config import uses_executed_rows
    from posttrain.data.contrastive import ALL_ROLES, ROLES
    from posttrain.models import load
    from posttrain.models.lora import lora_config

    algo = cfg.algo
    base, tokenizer = load(cfg, with_lora=False)
    roles = ALL_ROLES if uses_executed_rows(algo) else ROLES
    # tokenized with the run's length bound whether or not the terms are on: a member over it is a DataError
    layout = layout_of(cfg.data)
    encoded = TripletDataset(rows, tokenizer, algo.max_length, algo.pool, "answer", roles=roles, layout=layout)
    terms_on = algo.contrastive_weight > 0 or algo.consistency_weight > 0
    args = DPOConfig(
        **common_training_kwargs(cfg, run_dir),
        beta=algo.dpo_beta,
        loss_type=["sigmoid", "sft"] if algo.lm_weight > 0 else ["sigmoid"],
        loss_weights=[1.0, float(algo.lm_weight)] if algo.lm_weight > 0 else None,
        max_length=None,  # never truncated: the rows above are checked against algo.max_length
        remove_unused_columns=False,
    )
    collator = PairsWithRows(
        DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id),
        encoded if terms_on else None,
        TripletCollator(tokenizer.pad_token_id, roles=roles),
    )
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed + 1)
        head = ProjectionHead(base.config.hidden_size, algo.proj_dim, algo.head_hidden_dim)
    head.to(next(base.parameters()).device).requires_grad_(False)
    return SecAlignDPOTrainer(
        model=base,
        args=args,
        data_collator=collator,
        train_dataset=preference_pairs(rows, tokenizer, layout),
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=lora_config(cfg.model),
        run_cfg=cfg,
        head=head,
    )
