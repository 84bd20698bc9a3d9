"""The compact CSV tables experiments keep under results/: read, write, and one cell's text."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path


def cell(value: object) -> str:
    """A CSV cell: '' for a missing value, integers without '.0', other floats exactly (repr)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """`header` then `rows` (lists of cells), with '\\n' line ends."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def read_csv(path: Path, missing_ok: bool = False) -> list[dict[str, str]]:
    """The rows of `path` as dicts of strings ([] for a missing file with `missing_ok`)."""
    if missing_ok and not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
