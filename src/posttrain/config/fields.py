"""Every field of a composed config against its declaration (`posttrain.config.ranges`), before anything loads.

The schemas are walked, not the config: `Config`'s groups and the chosen algorithm's schema, nested dataclasses
included, so a new field is checked as soon as it declares a range. Paths are checked only where the run reads
files (`mode=plan` reads none). No torch import.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posttrain.config.ranges import RANGE, Free, PathKind, Range
from posttrain.errors import ConfigError


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass in `hint` (`X` or `X | None`), else None."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            return inner[0]  # type: ignore[return-value]
    return None


def schema_fields(schema: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, type hint) of every leaf field of `schema`; nested dataclasses (optional ones too)
    are walked, not yielded."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        nested = _dataclass_of(hints[f.name])
        if nested is not None:
            yield from schema_fields(nested, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f, hints[f.name]


def config_fields(algo_schema: type | None) -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """The leaf fields of `Config` with `algo` replaced by `algo_schema` (None: left out)."""
    from posttrain.config.schema import Config

    for key, f, hint in schema_fields(Config):
        if key != "algo":
            yield key, f, hint
    if algo_schema is not None:
        yield from schema_fields(algo_schema, "algo.")


def declaration(f: dataclasses.Field) -> Range | PathKind | Free | None:
    return f.metadata.get(RANGE)


def _value(cfg: DictConfig, key: str) -> Any:
    """The value at `key`; None where it is null, missing (`???`) or under a null parent (model.fetch=null)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if parent is None or leaf not in parent or OmegaConf.is_missing(parent, leaf):
        return None
    return parent[leaf]


def check_declared(cfg: DictConfig) -> None:
    """ConfigError (one line, naming the field, its value and what it must be) for the first value outside its
    declared range or path kind."""
    from posttrain.algos.registry import algorithms

    algorithm = algorithms().get(str(cfg.algo.name))  # an unknown name is refused by `validate` afterwards
    reads_files = cfg.mode != "plan"
    for key, f, _ in config_fields(algorithm.schema if algorithm else None):
        spec, value = declaration(f), _value(cfg, key)
        if value is None or spec is None or isinstance(spec, Free):
            continue
        if isinstance(spec, Range):
            problem = spec.problem(value)
            if problem:
                raise ConfigError(f"{key}={value} {problem}")
        elif reads_files:
            base = _value(cfg, spec.relative_to) if spec.relative_to else None
            problem = spec.problem(str(value), base)
            if problem:
                raise ConfigError(f"{key}={value}: {problem}")
