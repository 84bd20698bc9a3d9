"""Read local data files (UTF-8 JSONL / JSON) with errors that name the file, line and column.

A `prompt` column, where rows have one, follows TRL's prompt-dataset convention and is checked on read: non-empty
text, or a non-empty list of `{role, content}` chat messages, one kind for the whole file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain.errors import DataError


def read_text(path: str | Path) -> str:
    """The file's text; DataError for a missing file or bytes that are not UTF-8 (with line and column)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as ex:
        line_start = raw.rfind(b"\n", 0, ex.start) + 1
        lineno = raw.count(b"\n", 0, ex.start) + 1
        raise DataError(
            f"{path}:{lineno}:{ex.start - line_start + 1}: not UTF-8 text (byte 0x{raw[ex.start]:02x}); "
            "save the file as UTF-8"
        ) from None


def _json_error(path: Path, lineno: int, ex: json.JSONDecodeError) -> DataError:
    reason = re.sub(r"( starting)? at$", "", ex.msg)  # "Unterminated string starting at" + column
    return DataError(f"{path}:{lineno}:{ex.colno}: malformed JSON ({reason})")


def read_json(path: str | Path) -> Any:
    """A whole-file JSON document (UTF-8); DataError naming the line and column of a syntax error."""
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as ex:
        raise _json_error(path, ex.lineno, ex) from None


_JSON_TYPES = {bool: "true/false", int: "a number", float: "a number", type(None): "null", dict: "an object"}


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


def prompt_problem(prompt: Any) -> str | None:
    """Why `prompt` cannot be a GRPO/TRL prompt (None when it can)."""
    if isinstance(prompt, str):
        return None if prompt.strip() else "prompt is empty"
    if isinstance(prompt, list) and all(_is_message(m) for m in prompt):
        if not any(m["content"].strip() for m in prompt):
            return "prompt is empty (no message has any content)"
        return None
    got = "a list that is not {role, content} messages" if isinstance(prompt, list) else _JSON_TYPES[type(prompt)]
    return f"prompt must be a string or a list of chat messages {{role, content}}, got {got}"


def read_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows of a JSONL file; DataError for a missing or non-UTF-8 file, a malformed line (with its number), a
    missing key, or a bad `prompt`."""
    path = Path(path)
    rows = []
    prompt_kind: tuple[int, type] | None = None  # (line, str | list) of the first prompt
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.strip())
        except json.JSONDecodeError as ex:
            raise _json_error(path, lineno, ex) from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in required if k not in row]
        if missing:
            raise DataError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
        if "prompt" in row:
            problem = prompt_problem(row["prompt"])
            if problem:
                raise DataError(f"{path}:{lineno}: {problem}")
            kind = type(row["prompt"])
            prompt_kind = prompt_kind or (lineno, kind)
            if kind is not prompt_kind[1]:
                names: dict[type, str] = {str: "a string", list: "chat messages"}
                raise DataError(
                    f"{path}:{lineno}: prompt is {names[kind]} but line {prompt_kind[0]}'s is "
                    f"{names[prompt_kind[1]]} (use one kind for the whole file)"
                )
        rows.append(row)
    if not rows:
        raise DataError(f"dataset file is empty: {path}")
    return rows


def check_data_file(path: str | Path) -> None:
    """Read a local .jsonl/.json data file (or a directory of them) as the loaders will; DataError on bad input."""
    path = Path(path)
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    for f in files:
        if f.suffix == ".jsonl":
            read_jsonl(f)
        elif f.suffix == ".json":
            read_json(f)
