"""Declared valid values of config fields: each numeric and path field of each schema says which values it takes.

A declaration sits in the field's metadata, next to its one default:

    epsilon: float = num(0.2, ge=0)                                  # [0, inf)
    top_p: float = num(1.0, gt=0, le=1)                              # (0, 1]
    target: float | None = num(None, gt=0, note="or null: fixed beta")  # null allowed: the type says so
    path: str | None = local_path(None, kind="dir")                  # an existing directory, when set
    arch: dict[str, Any] = free({}, "transformers config kwargs, checked by the family's config class")

`free` is the explicit "any value": its reason says why the field has no range (or where it is checked).
`posttrain.config.fields.check_declared` holds a composed config against these before anything loads; the ranges
are those of the library that consumes the value (PEFT LoraConfig, transformers GenerationConfig, TRL GRPOConfig,
HF TrainingArguments) or narrower where a wider value cannot work in this repository.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RANGE = "range"  # the metadata key of a declaration
PATH_KINDS = ("file", "dir", "any")


@dataclass(frozen=True)
class Range:
    """A numeric interval; unset bounds are open to infinity. `note` is added to the error (what 0 or null means)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if (self.gt is not None and self.ge is not None) or (self.lt is not None and self.le is not None):
            raise ValueError("a range has at most one lower and one upper bound")

    def __str__(self) -> str:
        lo, hi = (self.gt, "(") if self.gt is not None else (self.ge, "[")
        up, close = (self.lt, ")") if self.lt is not None else (self.le, "]")
        if lo is not None and up is not None:
            return f"in {hi}{_num(lo)}, {_num(up)}{close}"
        if lo is not None:
            return f"{'>' if hi == '(' else '>='} {_num(lo)}"
        if up is not None:
            return f"{'<' if close == ')' else '<='} {_num(up)}"
        return "any number"

    def contains(self, value: float) -> bool:
        return not (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        )

    def problem(self, value: float) -> str | None:
        """None when `value` is in the range, else `must be <range> (<note>)`."""
        if self.contains(value):
            return None
        return f"must be {self}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class PathKind:
    """A local path: `kind` file | dir | any (either). A relative value is read from `under` (package files) or
    from the directory in the field `relative_to` (a dotted key), else from the working directory."""

    kind: str
    must_exist: bool = True  # False: a directory created on first use (it or its nearest ancestor must be a dir)
    special: tuple[str, ...] = ()  # values that are not paths (eval.checkpoint=init, resume=auto)
    hub_name: bool = False  # nothing at the path: the value is a hub name (checked when the hub is asked)
    relative_to: str | None = None
    under: Path | None = None
    suffix: str = ""  # added to the value (conf/accelerate/<name>.yaml)
    noun: str = ""  # what the error calls a missing path ("checkpoint directory"); default: file / directory

    def __post_init__(self) -> None:
        if self.kind not in PATH_KINDS:
            raise ValueError(f"path kind {self.kind!r} is not one of {', '.join(PATH_KINDS)}")

    def resolve(self, value: str, base: str | None = None) -> Path:
        path = Path(value + self.suffix).expanduser()
        root = self.under if self.under is not None else (Path(base).expanduser() if base else None)
        return root / path if root is not None and not path.is_absolute() else path

    def problem(self, value: str, base: str | None = None) -> str | None:
        """None when `value` names what this path must be, else what is wrong with it (one line)."""
        if value in self.special:
            return None
        path = self.resolve(value, base)
        where = f" ({path})" if str(path) != value else ""
        if path.is_symlink() and not path.exists():
            return f"is a broken symlink{where}"
        if not path.exists():
            if self.hub_name:
                return None
            if not self.must_exist:
                return dir_problem(path)
            noun = self.noun or {"file": "file", "dir": "directory", "any": "file or directory"}[self.kind]
            return f"no such {noun}{where}"
        if self.kind == "dir" and not path.is_dir():
            return f"is a file, not a directory{where}"
        if self.kind == "file" and not path.is_file():
            return f"is a directory, not a file{where}"
        return None


@dataclass(frozen=True)
class Free:
    """Any value of the field's type: no range of its own; `reason` says why, or where the value is checked."""

    reason: str


def dir_problem(path: Path) -> str | None:
    """None when `path` is a directory or can be created as one (its nearest existing ancestor is a directory)."""
    if path.is_dir():
        return None
    if path.exists():
        return "is a file, not a directory"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return None if ancestor.is_dir() else f"cannot be created: {ancestor} is a file"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _field(default: Any, spec: Range | PathKind | Free) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={RANGE: spec})
    return field(default=default, metadata={RANGE: spec})


def num(
    default: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    note: str = "",
) -> Any:
    """A numeric field whose value must lie in the range (null passes when the field's type allows it)."""
    return _field(default, Range(gt=gt, ge=ge, lt=lt, le=le, note=note))


def local_path(default: Any = None, *, kind: str, **spec: Any) -> Any:
    """A path field (see `PathKind` for `spec`); checked when the run reads files (not in `mode=plan`)."""
    return _field(default, PathKind(kind, **spec))


def free(default: Any, reason: str) -> Any:
    """A field that takes any value of its type, for `reason`."""
    return _field(default, Free(reason))
