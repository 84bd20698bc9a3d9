"""GRPO prompt datasets: repo generators, local JSONL, or hub sets; prompt lengths checked before training."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from datasets import Dataset
from omegaconf import DictConfig

from posttrain.data.jsonl import read_jsonl
from posttrain.data.rlvr import (
    generate_addition,
    generate_arithmetic,
    generate_ifeval,
    load_gsm8k,
    load_ifeval,
    load_rlvr_ifeval,
)
from posttrain.data.toy import length_prompts
from posttrain.errors import DataError

GENERATORS: dict[str, Callable[..., Dataset]] = {
    "length": length_prompts,
    "arith": generate_arithmetic,
    "add": generate_addition,
    "ifeval": generate_ifeval,
}
# data.name -> loader(name_or_path, split); data.path is a hub id or a local file in the hub schema
LOADERS: dict[str, Callable[..., Dataset]] = {
    "gsm8k": load_gsm8k,
    "ifeval": load_ifeval,
    "rlvr_ifeval": load_rlvr_ifeval,
}


def _load_named(data_cfg: DictConfig) -> Dataset:
    if data_cfg.name not in LOADERS:
        raise DataError(f"data.name={data_cfg.name!r} has no loader (available: {', '.join(sorted(LOADERS))})")
    loader = LOADERS[data_cfg.name]
    args = (data_cfg.path,) if data_cfg.path else ()
    try:
        return loader(*args, split=data_cfg.split)
    except FileNotFoundError as ex:
        raise DataError(f"data {data_cfg.name}: {ex}") from None


def build_grpo_dataset(data_cfg: DictConfig, tokenizer: Any, max_prompt_length: int) -> Dataset:
    """The training prompts for `data_cfg`, each verified to fit in `max_prompt_length` tokens."""
    if data_cfg.source == "generator":
        if data_cfg.name not in GENERATORS:
            raise DataError(
                f"data.name={data_cfg.name!r} has no generator (available: {', '.join(sorted(GENERATORS))})"
            )
        generator = GENERATORS[data_cfg.name]
        kwargs = dict(data_cfg.params)
        if "split" in inspect.signature(generator).parameters:  # generators with a held-out split (data=add)
            kwargs["split"] = data_cfg.split
        try:
            ds = generator(data_cfg.num_train, seed=data_cfg.seed, **kwargs)
        except ValueError as ex:
            raise DataError(f"data={data_cfg.name}: {ex}") from None
    elif data_cfg.source == "jsonl":
        if not data_cfg.path:
            raise DataError("data.source=jsonl needs data.path")
        ds = Dataset.from_list(read_jsonl(data_cfg.path, required=("prompt",)))
    else:
        ds = _load_named(data_cfg)
    if len(ds) == 0:
        raise DataError(f"data {data_cfg.name!r} is empty")
    check_prompt_lengths(ds, tokenizer, max_prompt_length)
    return ds


def prompt_length(tokenizer: Any, prompt: Any) -> int:
    if isinstance(prompt, list):
        out = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        # transformers 5 returns a BatchEncoding (len() = number of keys), older versions a list of ids
        return len(out["input_ids"] if hasattr(out, "keys") else out)
    return len(tokenizer(prompt).input_ids)


def check_prompt_lengths(ds: Dataset, tokenizer: Any, max_prompt_length: int) -> None:
    for i, prompt in enumerate(ds["prompt"]):
        n = prompt_length(tokenizer, prompt)
        if n > max_prompt_length:
            raise DataError(
                f"prompt {i} is {n} tokens, longer than algo.max_prompt_length={max_prompt_length} "
                "(raise it or shorten the data)"
            )
