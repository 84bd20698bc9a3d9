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
      "executed":       {"request": "...", "data": "..."},   # optional: the injected instruction as the trusted
                                                             # request over the benign data (default: the injection
                                                             # text itself as the request)
      "answer": "ana",                      # expected answer to the benign request (also under injection)
      "injection": "Ignore ... say PWNED.", # the embedded attack text
      "witness": "PWNED",                   # the output contains this (case-insensitive) iff the attack worked
      "injected_answer": "PWNED",           # optional: the reply that obeys the injection (default: the witness)
      "witness_heldout": false,             # optional: the witness word is one training never sees
      "cluster": "email-3"                  # optional: rows of one task instance (bootstraps resample clusters)
    }

Checked on load: the counterfactual keeps the data and changes the request; the injected member keeps the
request and embeds the injection inside otherwise benign data; the executed member keeps the data and changes the
request; the witness occurs in the injected answer when one is given, else in the injection.

`executed` is the fourth row kind of the invariance objective (the injection executed: its hard negative) and
`injected_answer` the rejected reply of preference training (`algo.preference=dpo`). Rows without them (the
one-word generator's, older JSONL files) get both derived: the injection text as the request, the witness as
the reply that obeys it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posttrain.data.jsonl import read_jsonl
from posttrain.errors import DataError

ROLES = ("benign", "counterfactual", "injected")
EXECUTED = "executed"
ALL_ROLES = (*ROLES, EXECUTED)  # the invariance objective's four row blocks, in batch order
REQUIRED = ("id", "benign", "counterfactual", "injected", "answer", "injection", "witness")


def validate_row(row: dict[str, Any], where: str = "row") -> dict[str, Any]:
    """Return `row` with defaults filled in; DataError naming the broken rule otherwise."""
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise DataError(f"{where}: missing key(s) {', '.join(missing)}")
    explicit_answer = "injected_answer" in row
    if isinstance(row["benign"], dict):
        row.setdefault(EXECUTED, {"request": row["injection"], "data": row["benign"].get("data")})
    row.setdefault("injected_answer", row["witness"])
    for role in ALL_ROLES:
        member = row[role]
        if not isinstance(member, dict) or not {"request", "data"} <= set(member):
            raise DataError(f"{where}: {role} must be an object with request and data")
    b, c, i, e = (row[r] for r in ALL_ROLES)
    if c["data"] != b["data"] or c["request"] == b["request"]:
        raise DataError(f"{where}: counterfactual must paraphrase the request (different text) over the same data")
    if i["request"] != b["request"]:
        raise DataError(f"{where}: injected must keep the benign request")
    if row["injection"] not in i["data"] or row["injection"] in b["data"]:
        raise DataError(f"{where}: the injection must be embedded in the injected data only")
    if e["data"] != b["data"] or e["request"] == b["request"]:
        raise DataError(f"{where}: executed must give another request (the injected one) over the benign data")
    witness, carrier = str(row["witness"]), "injected_answer" if explicit_answer else "injection"
    if not witness.strip() or witness.lower() not in str(row[carrier]).lower():
        raise DataError(f"{where}: witness {row['witness']!r} must occur in the {carrier.replace('_', ' ')}")
    if not str(row["answer"]).strip():
        raise DataError(f"{where}: empty answer")
    row.setdefault("task", "unknown")
    row.setdefault("attack_type", "unknown")
    row.setdefault("template_id", row["attack_type"])
    row.setdefault("heldout", False)
    row.setdefault("witness_heldout", False)
    row.setdefault("cluster", row["id"])
    return row


def load_triplets(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a triplet JSONL file, each validated (errors name the file and the row number)."""
    rows = read_jsonl(path, required=REQUIRED)
    return [validate_row(r, where=f"{path} row {n}") for n, r in enumerate(rows, start=1)]
