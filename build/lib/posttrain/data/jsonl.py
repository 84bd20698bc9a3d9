"""Read JSONL files with errors that name the file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from posttrain.errors import DataError


def read_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows of a JSONL file; DataError for a missing file, a malformed line (with its number) or a missing key."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    rows = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.strip())
            except json.JSONDecodeError as ex:
                reason = re.sub(r"( starting)? at$", "", ex.msg)  # "Unterminated string starting at" + column
                raise DataError(f"{path}:{lineno}:{ex.colno}: malformed JSON ({reason})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in required if k not in row]
            if missing:
                raise DataError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
            rows.append(row)
    if not rows:
        raise DataError(f"dataset file is empty: {path}")
    return rows
