"""Entry points and public API of `algo=contrastive` (the package re-exports them lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.contrastive.model import build_model

__all__ = ["build_model", "build_trainer", "summarize"]


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list | None = None):
    """Model, data and the trainer, ready to `.train()`: `ContrastiveTrainer` on the row blocks, or with
    `algo.preference=dpo` the `DPOTrainer` subclass of `dpo.py`."""
    from transformers import TrainingArguments

    from posttrain.algos.contrastive.config import uses_executed_rows
    from posttrain.algos.contrastive.trainer import ContrastiveTrainer
    from posttrain.data.contrastive import ALL_ROLES, ROLES, TripletCollator, TripletDataset, build_triplets, layout_of
    from posttrain.training_args import common_training_kwargs

    rows, algo = build_triplets(cfg.data, "train"), cfg.algo
    if algo.preference == "dpo":
        from posttrain.algos.contrastive.dpo import build_dpo_trainer

        return build_dpo_trainer(cfg, run_dir, rows, callbacks)
    model = build_model(cfg)
    tokenizer = model.tokenizer
    roles = ALL_ROLES if uses_executed_rows(algo) else ROLES
    dataset = TripletDataset(
        rows,
        tokenizer,
        algo.max_length,
        algo.pool,
        injected_target=cfg.data.params.get("injected_target", "answer"),
        pad_to_max_length=algo.pad_to_max_length,
        roles=roles,
        layout=layout_of(cfg.data),
    )
    args = TrainingArguments(**common_training_kwargs(cfg, run_dir), remove_unused_columns=False)
    return ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=TripletCollator(tokenizer.pad_token_id, roles=roles),
        processing_class=tokenizer,
        callbacks=callbacks,
        run_cfg=cfg,
    )


def summarize(cfg: DictConfig, trainer, run_dir: Path) -> dict[str, Any]:
    """Attack success and utility of the trained weights ('after') and, with `algo.eval_start`, the starting ones
    ('before') and their paired differences over the same items (`paired_after_minus_before`); the per-item
    records in `eval_after.jsonl` / `eval_before.jsonl` of the run dir."""
    if not cfg.algo.eval_at_end or cfg.data.num_eval <= 0:
        return {}
    from posttrain.algos.contrastive.evaluate import (
        evaluate_model,
        evaluate_start,
        flat,
        paired_vs,
        records,
        write_records,
    )
    from posttrain.data.contrastive import build_triplets

    rows = build_triplets(cfg.data, "eval")
    trained = trainer.contrastive_module()
    results = {"after": evaluate_model(cfg, trained, trainer.processing_class, rows=rows, return_replies=True)}
    if cfg.algo.eval_start:  # same model object: no second base copy
        results["before"] = evaluate_start(cfg, trained, trainer.processing_class, rows=rows, return_replies=True)
    summary: dict[str, Any] = {}
    recs = {}
    for tag, result in results.items():
        replies = result.pop("replies")
        write_records(Path(run_dir) / f"eval_{tag}.jsonl", rows, replies)
        recs[tag] = records(rows, replies["benign"], replies["injected"])
        summary.update({f"eval_{tag}": result, **flat(result, f"_{tag}")})
    if "before" in recs:
        summary["paired_after_minus_before"] = paired_vs(recs["after"], recs["before"])
    return summary
