"""Sequence lengths the data forms, measured before any weights load (for the memory plan).

The trainers pad each batch to its longest row, not to the config's bounds (`algo.max_prompt_length`,
`algo.max_length`, ...): a batch that holds the data's longest row is what the plan has to size. Each algorithm
measures its own rows in `Algorithm.workload` with the run's tokenizer; this module supplies that tokenizer when it
needs no download (the byte-level tokenizer of `model.tiny`, a local `model.path`, a hub id already in the local
cache) and remembers each measurement, since the plan's suggestion re-plans the same data many times. Without a
tokenizer, or for data that has to come from a hub, the algorithm plans with the bounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")
_MEASURED: dict[str, Any] = {}
LOCAL_SOURCES = ("generator", "jsonl")  # data built or read here; hub data sets are not fetched to plan


def local_tokenizer(model_cfg: DictConfig) -> Any | None:
    """The run's tokenizer with its chat template, or None when getting it would need the network."""
    from posttrain.models.tokenizer import build_byte_tokenizer, chat_template

    if model_cfg.tiny:
        return build_byte_tokenizer(model_cfg.family, model_cfg.chat_template)
    if model_cfg.get("gguf_file") or (model_cfg.get("fetch") and not model_cfg.get("path")):
        return None  # converted or fetched on first use: not planned from
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_cfg.get("path") or model_cfg.hub_id, local_files_only=True)
    except (OSError, ValueError):
        return None
    tokenizer.chat_template = chat_template(model_cfg.chat_template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def measured(cfg: DictConfig, keys: tuple[str, ...], measure: Callable[[Any], T]) -> T | None:
    """`measure(tokenizer)` for `cfg.data` (local sources only), remembered per data, model and the `cfg` keys
    (dotted) it depends on; None when there is no local tokenizer or the data is not local."""
    if cfg.data.source not in LOCAL_SOURCES:
        return None
    parts = {"data": cfg.data, "model": cfg.model, **{k: OmegaConf.select(cfg, k) for k in keys}}
    plain = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in parts.items()}
    key = json.dumps(plain, sort_keys=True, default=str)
    if key not in _MEASURED:
        tokenizer = local_tokenizer(cfg.model)
        _MEASURED[key] = None if tokenizer is None else measure(tokenizer)
    return _MEASURED[key]
