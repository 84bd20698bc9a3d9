"""Extractive / short-answer QA sets for D2L — SQuAD, DROP, ROPES — from a local file or the hub, as flat
`{doc_id, document, question, answer, answers}` records (`answers`: every gold answer, for scoring; `answer`: the
first, the training reply).

Each format names its columns as its hub data set does (and as a local JSON/JSONL file of the same rows must):
- `squad` (`rajpurkar/squad`): `context`, `question`, `answers` = `{text: [...], answer_start: [...]}` (also a list
  of `{text, answer_start}`, a list of strings or a string); a SQuAD v1/v2 JSON file
  (`{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}`) works too. Unanswerable questions are dropped.
- `drop` (`ucinlp/drop`): `passage`, `question`, `answers_spans` = `{spans: [...], types: [...]}`; the spans are the
  gold answers (the D2L paper's reference code trains on the first). DROP's own metric (number normalisation,
  multi-span alignment) is not reproduced: answers are scored with SQuAD's EM and F1.
- `ropes` (`allenai/ropes`): the document is `background` + newline + `situation` (as the D2L paper's code builds
  it), `question`, `answers` = `{text: [...]}`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.data.jsonl import read_json, read_jsonl
from posttrain.errors import DataError


@dataclass(frozen=True)
class QAFormat:
    context: tuple[str, ...]  # columns joined by a newline into the document
    answers: str  # the column holding the gold answers


FORMATS = {
    "squad": QAFormat(("context",), "answers"),
    "drop": QAFormat(("passage",), "answers_spans"),
    "ropes": QAFormat(("background", "situation"), "answers"),
}


def _answers(raw: Any) -> tuple[list[str], int | None]:
    """(the non-empty gold answers, the first one's answer_start if given) of an `answers` cell."""
    start = None
    if isinstance(raw, dict):
        starts = raw.get("answer_start")
        start = int(starts[0]) if isinstance(starts, list) and starts else None
        raw = raw.get("text", raw.get("spans", []))
    if isinstance(raw, str):
        raw = [raw]
    texts = []
    for a in raw or []:
        text = a.get("text") if isinstance(a, dict) else a
        if isinstance(a, dict) and start is None and a.get("answer_start") is not None:
            start = int(a["answer_start"])
        if text:
            texts.append(str(text))
    return texts, start


def _flat(rows: Iterable[dict[str, Any]], where: str, fmt: QAFormat) -> list[dict[str, Any]]:
    out: list[dict] = []
    doc_ids: dict[str, int] = {}
    for i, row in enumerate(rows):
        missing = [k for k in (*fmt.context, "question", fmt.answers) if k not in row]
        if missing:
            needed = ", ".join((*fmt.context, "question", fmt.answers))
            raise DataError(f"{where}: record {i} lacks {', '.join(missing)} (columns: {needed})")
        answers, start = _answers(row[fmt.answers])
        if not answers:
            continue  # unanswerable (SQuAD v2)
        document = "\n".join(str(row[c]) for c in fmt.context)
        rec = {
            "doc_id": doc_ids.setdefault(document, len(doc_ids)),
            "document": document,
            "question": row["question"],
            "answer": answers[0],
            "answers": answers,
        }
        if start is not None:
            rec["answer_start"] = start
        out.append(rec)
    return out


def _nested(data: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for article in data["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield {"context": para["context"], "question": qa["question"], "answers": qa.get("answers", [])}


def load_squad(path: str, split: str = "train", limit: int | None = None, fmt: str = "squad") -> list[dict[str, Any]]:
    """Flat QA records of a local file or hub data set in format `fmt` (squad, drop, ropes)."""
    if fmt not in FORMATS:
        raise DataError(f"unknown QA format {fmt!r} (known: {', '.join(FORMATS)})")
    p = Path(path)
    if p.is_file():
        if p.suffix == ".jsonl":
            rows = read_jsonl(p)
        else:
            raw = read_json(p)
            rows = list(_nested(raw)) if isinstance(raw, dict) and "data" in raw else raw
        records = _flat(rows, str(p), FORMATS[fmt])
    else:
        try:
            import datasets

            ds = datasets.load_dataset(path, split=split)
        except Exception as ex:  # no hub, unknown name
            raise DataError(f"cannot load QA set {path!r} (split {split}): {type(ex).__name__}: {ex}") from None
        records = _flat(ds, path, FORMATS[fmt])
    if not records:
        raise DataError(f"{path}: no answerable QA records")
    return records[:limit] if limit else records
