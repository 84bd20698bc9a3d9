"""Entry points and public API of `algo=d2l` (the package re-exports them lazily)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posttrain.algos.d2l.config import D2LAlgoConfig
from posttrain.algos.d2l.lora import GeneratedLoRA
from posttrain.algos.d2l.model import D2LModel, build_model
from posttrain.checkpoints import complete_checkpoints
from posttrain.dist import device_for
from posttrain.errors import CheckpointError

__all__ = [
    "D2LAlgoConfig",
    "D2LModel",
    "GeneratedLoRA",
    "build_model",
    "build_trainer",
    "evaluate",
    "load_d2l",
    "summarize",
]


def _featurized(cfg: DictConfig, model: D2LModel, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from posttrain.data.d2l import featurize_all

    return featurize_all(records, model.tokenizer, cfg.algo.max_length, **model.reading)


def teacher_key_parts(cfg: DictConfig) -> dict[str, Any]:
    """The base weights' identity in the teacher cache key: the model config, and the seed only for a tiny model
    (random init from `cfg.seed`; pretrained weights do not depend on it, so seeds share a cache). The teacher's
    inputs, tokenizer and template are hashed from the rows themselves (`teacher.teacher_cache_key`)."""
    key: dict[str, Any] = {"model": OmegaConf.to_container(cfg.model, resolve=True)}
    if cfg.model.tiny:
        key["seed"] = cfg.seed
    return key


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list | None = None):
    """Base model + hypernet (its weights from `algo.init_hypernet` when set), featurized training documents (+
    cached teacher top-k), `D2LTrainer`."""
    from transformers import TrainingArguments

    from posttrain.algos.d2l.batching import D2LCollator, ListDataset
    from posttrain.algos.d2l.trainer import D2LTrainer
    from posttrain.data.d2l import d2l_records
    from posttrain.training_args import common_training_kwargs

    algo = cfg.algo
    model = build_model(cfg)
    if algo.init_hypernet:
        model.load_hypernet(algo.init_hypernet)
    train_records, held_out = d2l_records(cfg.data, model.tokenizer)
    rows = _featurized(cfg, model, train_records)
    if algo.locality_coef > 0:
        from posttrain.algos.d2l.locality import attach_other_entity

        attach_other_entity(rows, train_records, algo.locality_span, model.tokenizer)
    monitor: dict[str, Any] = {}
    eval_dataset = None
    if algo.monitor_steps:
        from posttrain.algos.d2l.monitor import monitor_datasets

        splits = {"heldout": (_featurized(cfg, model, held_out), held_out), "train": (rows, train_records)}
        eval_dataset = monitor_datasets(splits, algo.monitor_docs)
        monitor = {
            "eval_strategy": "steps",
            "eval_steps": algo.monitor_steps,
            "per_device_eval_batch_size": algo.eval_batch_size,
            # a warm start's gap before its first step (a cold start's is 0: the generated LoRA starts at zero)
            "eval_on_start": bool(algo.init_hypernet),
        }
    teacher = None
    if algo.kl_coef > 0:  # computed by the trainer once it has placed the model
        teacher = {
            "k": algo.kl_top_k,
            "temperature": algo.kl_temperature,
            "cache_dir": Path(algo.kl_cache_dir) if algo.kl_cache_dir else Path(run_dir) / "cache",
            "key_parts": teacher_key_parts(cfg),
        }
    args = TrainingArguments(**common_training_kwargs(cfg, run_dir), remove_unused_columns=False, **monitor)
    return D2LTrainer(
        model=model,
        args=args,
        train_dataset=ListDataset(rows),
        eval_dataset=eval_dataset,
        data_collator=D2LCollator(model.tokenizer.pad_token_id, teacher=algo.kl_coef > 0),
        callbacks=callbacks,
        ce_coef=algo.ce_coef,
        kl_coef=algo.kl_coef,
        l1_coef=algo.l1_coef,
        kl_temperature=algo.kl_temperature,
        locality_coef=algo.locality_coef,
        teacher=teacher,
    )


def _eval(cfg: DictConfig, model: D2LModel) -> dict[str, Any]:
    from posttrain.algos.d2l.config import context_window
    from posttrain.algos.d2l.evaluate import evaluate_model
    from posttrain.data.d2l import d2l_records

    train, held_out = d2l_records(cfg.data, model.tokenizer)
    algo = cfg.algo
    if algo.eval_distractors:
        from posttrain.algos.d2l.binding import with_distractors

        held_out = with_distractors(held_out, int(cfg.data.seed))  # the same documents for every run seed
    return evaluate_model(
        model,
        held_out,
        algo.max_length,
        algo.max_new_tokens,
        algo.eval_batch_size,
        context_window=context_window(cfg),
        conditions=None if algo.eval_conditions is None else list(algo.eval_conditions),
        baselines=algo.baselines,
        train_records=train if algo.baselines.format_lora_steps else None,
        seed=int(cfg.seed),
    )


def _flat_eval(result: dict[str, Any]) -> dict[str, Any]:
    """The scalar numbers of the evaluation (`eval_<condition>_<metric>`, timings) for summary.json."""
    timings = ("internalize_ms_per_doc", "cd_ms_per_doc", "format_lora_train_s")
    out = {k: result[k] for k in timings if k in result}
    for cond in result["conditions"]:
        for metric, value in result[cond].items():
            if not isinstance(value, list):
                out[f"eval_{cond}_{metric}"] = value
    return out


def summarize(cfg: DictConfig, trainer, run_dir: Path) -> dict[str, Any]:
    """With `algo.eval_at_end`, the held-out table (also in `eval.json`)."""
    summary: dict[str, Any] = {}
    if cfg.algo.eval_at_end and cfg.data.num_eval > 1:
        model = trainer.accelerator.unwrap_model(trainer.model)
        result = _eval(cfg, model)
        (Path(run_dir) / "eval.json").write_text(json.dumps(result, indent=2))
        summary.update(_flat_eval(result))
    return summary


def find_checkpoint(path: str | Path) -> Path:
    """A dir holding `hypernet.safetensors`, or a run dir / checkpoints dir (its newest complete checkpoint)."""
    from posttrain.algos.d2l.model import WEIGHTS

    p = Path(path)
    if (p / WEIGHTS).is_file():
        return p
    for root in (p / "checkpoints", p):
        ckpts = [c for c in complete_checkpoints(root) if (c / WEIGHTS).is_file()]
        if ckpts:
            return ckpts[-1]
    raise CheckpointError(f"{path}: no D2L checkpoint (hypernet.safetensors) found")


def load_d2l(cfg: DictConfig, checkpoint: str | Path) -> D2LModel:
    """Python API: the D2L model for `cfg` with the hypernet of `checkpoint` (a checkpoint, run or checkpoints dir),
    on the device `cfg.hw` names."""
    model = build_model(cfg).to(device_for(cfg))
    model.load_hypernet(find_checkpoint(checkpoint))
    return model


def evaluate(cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
    """`mode=eval`: held-out table for `checkpoint` (None: the untrained hypernet, whose LoRA is zero)."""
    model = load_d2l(cfg, checkpoint) if checkpoint is not None else build_model(cfg).to(device_for(cfg))
    result = _eval(cfg, model)
    (Path(run_dir) / "eval.json").write_text(json.dumps(result, indent=2))
    return {"algo": "d2l", "mode": "eval", **_flat_eval(result), "eval": result}
