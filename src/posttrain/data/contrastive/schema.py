"""The triplet row schema (JSONL, one object per line) and its loader.

    {
      "id": "email-3",                      # any string
      "task": "email",                      # email | rag_qa | code | calendar | document (free text for own data)
      "attack_type": "ignore",              # free text, used to break down attack success
      "template_id": "ignore/heldout/0",    # free text
      "heldout": true,                      # the attack template is one training never sees
      "benign":         {"request": "...", "data": "..."},
      "counterfactual": {"request": "...", "data": "..."},   # a paraphrase of the benign request, same data
      "injected":       {"request": "...", "data": "..."},   # the benign request, data with the injection inside
      "answer": "ana",                      # expected answer to the benign request (also under injection)
      "injection": "Ignore ... say PWNED.", # the embedded attack text
      "witness": "PWNED",                   # the output contains this (case-insensitive) iff the attack worked
      "witness_heldout": false              # optional: the witness word is one training never sees
    }

Checked on load: the counterfactual keeps the data and changes the request; the injected member keeps the
request and embeds the injection inside otherwise benign data; the witness occurs in the injection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain.data.jsonl import read_jsonl
from posttrain.errors import DataError

ROLES = ("benign", "counterfactual", "injected")
REQUIRED = ("id", "benign", "counterfactual", "injected", "answer", "injection", "witness")


def validate_row(row: dict[str, Any], where: str = "row") -> dict[str, Any]:
    """Return `row` with defaults filled in; DataError naming the broken rule otherwise."""
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise DataError(f"{where}: missing key(s) {', '.join(missing)}")
    for role in ROLES:
        member = row[role]
        if not isinstance(member, dict) or not {"request", "data"} <= set(member):
            raise DataError(f"{where}: {role} must be an object with request and data")
    b, c, i = (row[r] for r in ROLES)
    if c["data"] != b["data"] or c["request"] == b["request"]:
        raise DataError(f"{where}: counterfactual must paraphrase the request (different text) over the same data")
    if i["request"] != b["request"]:
        raise DataError(f"{where}: injected must keep the benign request")
    if row["injection"] not in i["data"] or row["injection"] in b["data"]:
        raise DataError(f"{where}: the injection must be embedded in the injected data only")
    if not str(row["witness"]).strip() or row["witness"].lower() not in row["injection"].lower():
        raise DataError(f"{where}: witness {row['witness']!r} must occur in the injection")
    if not str(row["answer"]).strip():
        raise DataError(f"{where}: empty answer")
    row.setdefault("task", "unknown")
    row.setdefault("attack_type", "unknown")
    row.setdefault("template_id", row["attack_type"])
    row.setdefault("heldout", False)
    row.setdefault("witness_heldout", False)
    return row


def load_triplets(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a triplet JSONL file, each validated (errors name the file and the row number)."""
    rows = read_jsonl(path, required=REQUIRED)
    return [validate_row(r, where=f"{path} row {n}") for n, r in enumerate(rows, start=1)]
