"""Offline synthetic documents for D2L: fictional entities with a few attributes, and QA pairs about them.

Each document describes one made-up entity ("Vokira lives in Oslo. Vokira likes teal. ...") and each QA pair asks
for one attribute ("Where does Vokira live?" -> "Oslo"). Answers are short words from small closed sets, so a
randomly initialised tiny model can learn the task from scratch on CPU; the answer is only knowable from the
document. Train and held-out documents use disjoint entity names (held-out names are drawn from a separate pool).
"""

from __future__ import annotations

import random
from typing import Any

# attribute -> (sentence template, question template, values)
ATTRIBUTES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "city": (
        "{e} lives in {v}.",
        "Where does {e} live?",
        ("Oslo", "Rome", "Lima", "Kyiv", "Baku", "Riga", "Doha", "Pune"),
    ),
    "color": (
        "{e} likes {v}.",
        "What color does {e} like?",
        ("red", "blue", "green", "gold", "pink", "gray", "teal", "plum"),
    ),
    "pet": ("{e} owns a {v}.", "What pet does {e} own?", ("cat", "dog", "owl", "fox", "yak", "eel", "bat", "cow")),
    "food": ("{e} eats {v}.", "What does {e} eat?", ("rice", "kale", "figs", "corn", "lime", "soup", "eggs", "nuts")),
    "job": (
        "{e} works as a {v}.",
        "What is {e}'s job?",
        ("baker", "pilot", "nurse", "judge", "miner", "clerk", "tutor", "poet"),
    ),
}
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def entity_name(rng: random.Random, held_out: bool) -> str:
    """Three-syllable made-up name; train names end in a vowel, held-out names in 'n' (disjoint pools)."""
    name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(3))
    return (name + "n" if held_out else name).capitalize()


def make_document(rng: random.Random, attributes: list[str], held_out: bool) -> dict[str, Any]:
    entity = entity_name(rng, held_out)
    facts = {a: rng.choice(ATTRIBUTES[a][2]) for a in attributes}
    order = list(attributes)
    rng.shuffle(order)
    doc = " ".join(ATTRIBUTES[a][0].format(e=entity, v=facts[a]) for a in order)
    qas = [{"question": ATTRIBUTES[a][1].format(e=entity), "answer": facts[a]} for a in attributes]
    return {"entity": entity, "document": doc, "qas": qas, "facts": facts}


def synthetic_documents(
    num_docs: int, seed: int = 0, held_out: bool = False, num_attributes: int = 2, attributes: list[str] | None = None
) -> list[dict[str, Any]]:
    """`num_docs` documents, each with `num_attributes` attributes drawn from `attributes` (default: all)."""
    pool = list(attributes or ATTRIBUTES)
    unknown = [a for a in pool if a not in ATTRIBUTES]
    if unknown:
        raise ValueError(f"unknown attributes {unknown} (known: {', '.join(ATTRIBUTES)})")
    if not 1 <= num_attributes <= len(pool):
        raise ValueError(f"num_attributes={num_attributes} must be in [1, {len(pool)}]")
    rng = random.Random(f"d2l-synth-{seed}-{'heldout' if held_out else 'train'}")
    return [make_document(rng, sorted(rng.sample(pool, num_attributes)), held_out) for _ in range(num_docs)]


def synthetic_qa(num_docs: int, seed: int = 0, held_out: bool = False, **params: Any) -> list[dict[str, str]]:
    """Flat QA records `{doc_id, document, question, answer}` (one per attribute of each document)."""
    records = []
    for i, d in enumerate(synthetic_documents(num_docs, seed=seed, held_out=held_out, **params)):
        for qa in d["qas"]:
            records.append({"doc_id": i, "document": d["document"], **qa})
    return records
