"""Entry points and public API of `algo=contrastive` (the package re-exports them lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.contrastive.model import build_model

__all__ = ["build_model", "build_trainer", "summarize"]


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list | None = None):
    """Model, triplet data and `ContrastiveTrainer`, ready to `.train()`."""
    from transformers import TrainingArguments

    from posttrain.algos.contrastive.trainer import ContrastiveTrainer
    from posttrain.data.contrastive import TripletCollator, TripletDataset, build_triplets
    from posttrain.training_args import common_training_kwargs

    model = build_model(cfg)
    tokenizer, algo = model.tokenizer, cfg.algo
    dataset = TripletDataset(
        build_triplets(cfg.data, "train"),
        tokenizer,
        algo.max_length,
        algo.pool,
        injected_target=cfg.data.params.get("injected_target", "answer"),
        pad_to_max_length=algo.pad_to_max_length,
    )
    args = TrainingArguments(**common_training_kwargs(cfg, run_dir), remove_unused_columns=False)
    return ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=TripletCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=callbacks,
        run_cfg=cfg,
    )


def summarize(cfg: DictConfig, trainer, run_dir: Path) -> dict[str, Any]:
    """Attack success and utility of the starting weights ('before') and the trained ones ('after'); the
    per-example records in `eval_before.jsonl` / `eval_after.jsonl` of the run dir."""
    if not cfg.algo.eval_at_end or cfg.data.num_eval <= 0:
        return {}
    from posttrain.algos.contrastive.evaluate import evaluate_model, evaluate_start, flat, write_records
    from posttrain.data.contrastive import build_triplets

    rows = build_triplets(cfg.data, "eval")
    trained = trainer.accelerator.unwrap_model(trainer.model)
    after = evaluate_model(cfg, trained, trainer.processing_class, rows=rows, return_replies=True)
    # same model object: no second base copy
    before = evaluate_start(cfg, trained, trainer.processing_class, rows=rows, return_replies=True)
    for tag, result in (("before", before), ("after", after)):
        write_records(Path(run_dir) / f"eval_{tag}.jsonl", rows, result.pop("replies"))
    return {"eval_before": before, "eval_after": after, **flat(before, "_before"), **flat(after, "_after")}
