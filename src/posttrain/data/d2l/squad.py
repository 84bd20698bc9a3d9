"""SQuAD-style QA sets for D2L: `{context, question, answers: {text: [...]}}` from a local file or the hub.

Local files: a SQuAD v1/v2 JSON (`{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}`) or JSONL with one flat
record per line (`context`, `question`, `answers` as a dict with `text`, a list, or a string). By name (hub):
`datasets.load_dataset(name, split=split)` with the same column names (e.g. `rajpurkar/squad`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from posttrain.data.jsonl import read_json, read_jsonl
from posttrain.errors import DataError


def _answer(answers: Any) -> str | None:
    if isinstance(answers, dict):
        answers = answers.get("text", [])
    if isinstance(answers, str):
        return answers or None
    for a in answers or []:
        text = a.get("text") if isinstance(a, dict) else a
        if text:
            return str(text)
    return None  # unanswerable (SQuAD v2)


def _flat(rows: Iterable[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    out: list[dict] = []
    doc_ids: dict[str, int] = {}
    for i, row in enumerate(rows):
        missing = [k for k in ("context", "question", "answers") if k not in row]
        if missing:
            raise DataError(
                f"{where}: record {i} lacks {', '.join(missing)} (SQuAD schema: context, question, answers)"
            )
        answer = _answer(row["answers"])
        if answer is None:
            continue
        doc_id = doc_ids.setdefault(row["context"], len(doc_ids))
        out.append({"doc_id": doc_id, "document": row["context"], "question": row["question"], "answer": answer})
    return out


def _nested(data: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for article in data["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield {"context": para["context"], "question": qa["question"], "answers": qa.get("answers", [])}


def load_squad(path: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """Flat `{doc_id, document, question, answer}` records (unanswerable questions dropped)."""
    p = Path(path)
    if p.is_file():
        if p.suffix == ".jsonl":
            rows = read_jsonl(p)
        else:
            raw = read_json(p)
            rows = list(_nested(raw)) if isinstance(raw, dict) and "data" in raw else raw
        records = _flat(rows, str(p))
    else:
        try:
            import datasets

            ds = datasets.load_dataset(path, split=split)
        except Exception as ex:  # no hub, unknown name
            raise DataError(
                f"cannot load SQuAD-style set {path!r} (split {split}): {type(ex).__name__}: {ex}"
            ) from None
        records = _flat(ds, path)
    if not records:
        raise DataError(f"{path}: no answerable QA records")
    return records[:limit] if limit else records
