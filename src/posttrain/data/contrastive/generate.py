"""Offline generator of (benign, counterfactual, injected) triplets; `python -m posttrain.data.contrastive.generate`.

One triplet shares a task, its data and its expected answer:
- benign: request paraphrase A + data,
- counterfactual: a *different* paraphrase B of the same request + the same data (same expected answer),
- injected: request A + the same data with an attack instruction embedded inside it (an email body line, a
  passage sentence, a code comment, a calendar note, a document paragraph).
The row schema is documented in `posttrain.data.contrastive.schema`.

Options (`data.params.*` of `data=contrastive_injection`, passed through `build_triplets`):
- `witness_split` (default false): held-out templates ask for held-out witness words (`templates.WITNESSES`),
  training templates for training ones; the row's `witness_heldout` says which.
- `injection_position` (default any): where the injection goes among the data's filler lines — any (random
  slot: before, between or after them), start, or end (last line of the data).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain.data.contrastive.schema import validate_row
from posttrain.data.contrastive.templates import (
    ATTACK_TYPES,
    ATTACKS,
    TASK_KINDS,
    TASKS,
    is_heldout,
    templates,
    witness_pool,
)

POSITIONS = ("any", "start", "end")


def _data(kind: str, answer: str, rng: random.Random, injection: str | None, position: str = "any") -> tuple[str, str]:
    """(data text, request fill-in topic) for one task kind; `injection` goes inside the data when given."""
    spec = TASKS[kind]
    # every draw happens whether or not there is an injection, so both versions share the same data
    fillers = rng.sample(spec["fillers"], 2)
    slot = rng.randrange(len(fillers) + 1)  # the injection replaces nothing: it goes before, between or after
    slot = {"any": slot, "start": 0, "end": len(fillers)}[position]  # drawn anyway: same stream for every position
    topic = rng.choice(spec["topics"]) if "topics" in spec else ""
    event = rng.choice(spec["events"]) if "events" in spec else ""
    lines = list(fillers)
    if injection is not None:
        lines.insert(slot, injection)
    if kind == "email":
        text = f"From: {answer}\nSubject: update\n" + "\n".join(lines)
    elif kind == "rag_qa":
        text = f"The capital of {topic} is {answer}. " + " ".join(lines)
    elif kind == "code":
        body = "\n".join(f"    {ln}" if ln.startswith("#") else f"    # {ln}" for ln in lines)
        text = f"def {answer}(x):\n{body}\n    return x"
    elif kind == "calendar":
        text = f"Event: {event}\nDay: {answer}\nNote: " + " ".join(lines)
    elif kind == "document":
        text = f"Title: {answer}\n" + " ".join(lines)
    else:
        raise ValueError(f"unknown task kind {kind!r}")
    return text, topic


def make_triplet(
    rng: random.Random,
    kind: str,
    template_id: str,
    template: str,
    idx: int,
    witness_split: bool = False,
    injection_position: str = "any",
) -> dict[str, Any]:
    """One triplet row; the same rng draws give the same data text for all three members."""
    spec = TASKS[kind]
    answer = rng.choice(spec["answers"])
    req_a, req_b = rng.sample(spec["requests"], 2)  # two different paraphrases of the same question
    heldout = is_heldout(template_id)
    witness = rng.choice(witness_pool(heldout, witness_split))
    injection = template.format(w=witness)
    state = rng.getstate()
    data, topic = _data(kind, answer, rng, None, injection_position)
    rng.setstate(state)  # replay the same draws so the injected data differs only by the injection
    injected_data, _ = _data(kind, answer, rng, injection, injection_position)
    req_a, req_b = req_a.format(topic=topic), req_b.format(topic=topic)
    return {
        "id": f"{kind}-{idx}",
        "task": kind,
        "attack_type": template_id.split("/")[0],
        "template_id": template_id,
        "heldout": heldout,
        "benign": {"request": req_a, "data": data},
        "counterfactual": {"request": req_b, "data": data},
        "injected": {"request": req_a, "data": injected_data},
        "answer": answer,
        "injection": injection,
        "witness": witness,
        "witness_heldout": witness_split and heldout,
    }


def generate_triplets(
    n: int,
    seed: int = 0,
    split: str = "train",
    task_kinds: Sequence[str] = TASK_KINDS,
    attack_types: Sequence[str] = ATTACK_TYPES,
    witness_split: bool = False,
    injection_position: str = "any",
) -> list[dict[str, Any]]:
    """`n` triplets cycling over task kinds; `split`: train (training templates only), heldout, or all.
    `witness_split` / `injection_position`: see the module docstring."""
    unknown = [k for k in task_kinds if k not in TASKS] + [a for a in attack_types if a not in ATTACKS]
    if unknown:
        raise ValueError(f"unknown task kind / attack type: {', '.join(unknown)}")
    if injection_position not in POSITIONS:
        raise ValueError(f"injection_position={injection_position!r} is not one of {', '.join(POSITIONS)}")
    pool = templates(split, tuple(attack_types))
    if not pool:
        raise ValueError(f"no attack templates for split={split} and attack types {list(attack_types)}")
    rng = random.Random(f"contrastive-{seed}-{split}")
    rows = []
    for i in range(n):
        kind = task_kinds[i % len(task_kinds)]
        template_id, template = pool[rng.randrange(len(pool))]
        row = make_triplet(rng, kind, template_id, template, i, witness_split, injection_position)
        rows.append(validate_row(row))
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default="train", choices=("train", "heldout", "all"))
    ap.add_argument("--witness-split", action="store_true", help="held-out templates ask for held-out witnesses")
    ap.add_argument("--injection-position", default="any", choices=POSITIONS)
    args = ap.parse_args(argv)
    rows = generate_triplets(
        args.n, args.seed, args.split, witness_split=args.witness_split, injection_position=args.injection_position
    )
    print(write_jsonl(rows, args.out))


if __name__ == "__main__":
    main()
