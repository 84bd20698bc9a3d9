"""Prompt-injection triplets for `algo=contrastive`: generators (the one-word triplets of `generate`, the
SecAlign-style tasks of `secalign`), JSONL schema/loader, tokenization and collation.

Importing the package loads no torch (config validation reads `secalign`): the tokenizing names of `encode` load
on first use."""

from __future__ import annotations

import importlib
from typing import Any

from omegaconf import DictConfig

from posttrain.data.contrastive.generate import generate_triplets, write_jsonl
from posttrain.data.contrastive.schema import ALL_ROLES, EXECUTED, ROLES, load_triplets, validate_row
from posttrain.data.contrastive.secalign import generate_secalign, spec_from_params
from posttrain.data.contrastive.templates import ATTACK_TYPES, TASK_KINDS
from posttrain.errors import DataError

_ENCODE = (
    "TripletCollator",
    "TripletDataset",
    "pad_rows",
    "prompt_messages",
    "user_message",
)  # posttrain.data.contrastive.encode


def __getattr__(name: str) -> Any:
    if name in _ENCODE:
        return getattr(importlib.import_module("posttrain.data.contrastive.encode"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALL_ROLES",
    "EXECUTED",
    "ROLES",
    "TripletCollator",
    "TripletDataset",
    "build_triplets",
    "generate_secalign",
    "generate_triplets",
    "layout_of",
    "load_triplets",
    "pad_rows",
    "prompt_messages",
    "user_message",
    "validate_row",
    "write_jsonl",
]


def _param(data_cfg: DictConfig, key: str, default: Any) -> Any:
    value = data_cfg.params.get(key, default)
    return list(value) if hasattr(value, "__iter__") and not isinstance(value, str) else value


def layout_of(data_cfg: DictConfig) -> str:
    """`data.params.layout`: how a prompt lays out the request and the data (`encode.prompt_messages`)."""
    return str(_param(data_cfg, "layout", "one_turn"))


def is_secalign(data_cfg: DictConfig) -> bool:
    """Whether `data_cfg` asks for the SecAlign-style generator (`data.params.generator=secalign`)."""
    generator = _param(data_cfg, "generator", "triplets")
    if generator not in ("triplets", "secalign"):
        raise DataError(f"data.params.generator={generator!r} is not one of triplets, secalign")
    return data_cfg.source == "generator" and generator == "secalign"


def build_triplets(data_cfg: DictConfig, split: str) -> list[dict[str, Any]]:
    """Rows for `split` (train | eval). Training never holds held-out attack templates or held-out witness words
    unless `data.params.train_templates=all` (the deliberately vulnerable 'before' model of the experiment).

    Generator options (`data.params`): task_kinds, attack_types, train_templates (train | all), eval_templates
    (all: fresh eval rows over every template | heldout: held-out templates only), witness_split,
    injection_position (see `posttrain.data.contrastive.generate`).
    `data.params.generator=secalign` (`posttrain.data.contrastive.secalign`, `data=contrastive_secalign`):
    `num_train` rows; `num_eval` task instances, each crossed with every eval attack family and position; options
    `secalign.SPEC_KEYS`, and `eval_split=test` to evaluate on the generator's untouched test split instead."""
    train_templates = _param(data_cfg, "train_templates", "train")
    if is_secalign(data_cfg):
        spec = spec_from_params(data_cfg.params)
        if spec.problems():
            raise DataError(f"data.params: {'; '.join(spec.problems())}")
        drawn = "test" if split == "eval" and _param(data_cfg, "eval_split", "eval") == "test" else split
        rows = generate_secalign(
            data_cfg.num_train if split == "train" else data_cfg.num_eval, data_cfg.seed, drawn, spec
        )
    elif data_cfg.source == "generator":
        eval_templates = _param(data_cfg, "eval_templates", "all")
        if eval_templates not in ("all", "heldout"):
            raise DataError(f"data.params.eval_templates={eval_templates!r} is not one of all, heldout")
        kw = dict(
            task_kinds=_param(data_cfg, "task_kinds", list(TASK_KINDS)),
            attack_types=_param(data_cfg, "attack_types", list(ATTACK_TYPES)),
            witness_split=bool(_param(data_cfg, "witness_split", False)),
            injection_position=_param(data_cfg, "injection_position", "any"),
        )
        if split == "train":
            rows = generate_triplets(data_cfg.num_train, data_cfg.seed, train_templates, **kw)
        else:  # eval: fresh examples over every template (train and held-out), or the held-out ones only
            rows = generate_triplets(data_cfg.num_eval, data_cfg.seed, eval_templates, **kw)
    elif data_cfg.source == "jsonl":
        path = data_cfg.path if split == "train" else _param(data_cfg, "eval_path", None)
        if not path:
            raise DataError(f"data.source=jsonl needs {'data.path' if split == 'train' else 'data.params.eval_path'}")
        rows = load_triplets(path)
        limit = data_cfg.num_train if split == "train" else data_cfg.num_eval
        rows = rows[:limit] if limit else rows
    else:
        raise DataError(f"data.source={data_cfg.source} is not supported by algo=contrastive (generator, jsonl)")
    if split == "train" and train_templates != "all":
        leaked = [r["id"] for r in rows if r["heldout"]]
        if leaked:
            raise DataError(f"{len(leaked)} training triplets use held-out attack templates (first: {leaked[0]})")
        leaked = [r["id"] for r in rows if r["witness_heldout"]]
        if leaked:
            raise DataError(f"{len(leaked)} training triplets use held-out witness words (first: {leaked[0]})")
    if not rows:
        raise DataError(f"data {data_cfg.name!r} has no {split} triplets")
    return rows
