"""Offline synthetic documents for D2L: fictional entities with a few attributes, and QA pairs about them.

Each document describes one made-up entity ("Vokira lives in Oslo. Vokira likes teal. ...") and each QA pair asks
for one attribute ("Where does Vokira live?" -> "Oslo"); the answer is only knowable from the document. Train and
held-out documents use disjoint entity names (held-out names are drawn from a separate pool).

Two attribute sets (`data.params.attribute_set`):
- `tiny` (default): 5 attributes x 8 values, 3-5 character answers, so that a randomly initialised tiny model can
  learn the task from scratch on CPU;
- `chat`: 6 attributes x 16 values, phrased the way a small pretrained chat model reads from context (each
  sentence/question pair was kept because SmolLM2-135M-Instruct answers it from the document in the prompt; see
  experiments/d2l_smollm2/), with values a model guesses without the document (dog, cat, blue, piano, ...) left out.
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


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


CHAT_ATTRIBUTES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "city": (
        "{e} lives in {v}.",
        "Where does {e} live?",
        _words("Oslo Rome Lima Kyiv Baku Riga Doha Pune Berlin Madrid Cairo Tokyo Seoul Dublin Vienna Lisbon"),
    ),
    "pet": (
        "{e} owns a {v}.",
        "What animal does {e} own?",
        _words("fox rabbit parrot turtle hamster snake goat horse frog mouse duck pig lizard pony hedgehog ferret"),
    ),
    "job": (
        "{e} works as a {v}.",
        "What is {e}'s job?",
        _words(
            "baker pilot nurse judge miner clerk tutor poet farmer dentist lawyer chef painter plumber sailor banker"
        ),
    ),
    "instrument": (
        "{e} plays the {v}.",
        "Which instrument does {e} play?",
        _words(
            "violin guitar flute drums cello harp trumpet banjo organ tuba clarinet saxophone ukulele accordion "
            "harmonica mandolin"
        ),
    ),
    "color": (
        "{e}'s favorite color is {v}.",
        "What is {e}'s favorite color?",
        _words("red green gold pink gray purple orange black white brown yellow silver teal violet beige maroon"),
    ),
    "food": (
        "{e} loves to eat {v}.",
        "What does {e} love to eat?",
        _words("rice pasta soup bread cheese salad tacos sushi noodles apples cake curry beans eggs honey lentils"),
    ),
}
ATTRIBUTE_SETS = {"tiny": ATTRIBUTES, "chat": CHAT_ATTRIBUTES}
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def entity_name(rng: random.Random, held_out: bool) -> str:
    """Three-syllable made-up name; train names end in a vowel, held-out names in 'n' (disjoint pools)."""
    name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(3))
    return (name + "n" if held_out else name).capitalize()


def make_document(
    rng: random.Random, attributes: list[str], held_out: bool, table: dict[str, tuple[str, str, tuple[str, ...]]]
) -> dict[str, Any]:
    entity = entity_name(rng, held_out)
    facts = {a: rng.choice(table[a][2]) for a in attributes}
    order = list(attributes)
    rng.shuffle(order)
    doc = " ".join(table[a][0].format(e=entity, v=facts[a]) for a in order)
    qas = [
        {
            "question": table[a][1].format(e=entity),
            "answer": facts[a],
            "sentence": table[a][0].format(e=entity, v=facts[a]),
        }
        for a in attributes
    ]
    return {"entity": entity, "document": doc, "qas": qas, "facts": facts}


def synthetic_documents(
    num_docs: int,
    seed: int = 0,
    held_out: bool = False,
    num_attributes: int = 2,
    attributes: list[str] | None = None,
    attribute_set: str = "tiny",
) -> list[dict[str, Any]]:
    """`num_docs` documents, each with `num_attributes` attributes drawn from `attributes` (default: all of
    `attribute_set`'s)."""
    if attribute_set not in ATTRIBUTE_SETS:
        raise ValueError(f"unknown attribute_set {attribute_set!r} (known: {', '.join(ATTRIBUTE_SETS)})")
    table = ATTRIBUTE_SETS[attribute_set]
    pool = list(attributes or table)
    unknown = [a for a in pool if a not in table]
    if unknown:
        raise ValueError(f"unknown attributes {unknown} for attribute_set={attribute_set} (known: {', '.join(table)})")
    if not 1 <= num_attributes <= len(pool):
        raise ValueError(f"num_attributes={num_attributes} must be in [1, {len(pool)}]")
    rng = random.Random(f"d2l-synth-{seed}-{'heldout' if held_out else 'train'}")
    return [make_document(rng, sorted(rng.sample(pool, num_attributes)), held_out, table) for _ in range(num_docs)]


def synthetic_qa(
    num_docs: int, seed: int = 0, held_out: bool = False, reply: str = "answer", **params: Any
) -> list[dict[str, str]]:
    """Flat QA records `{doc_id, document, question, answer}` (one per attribute of each document).

    `reply` is what the model is trained (and its answer loss measured) to say: `answer`, the bare answer ("Oslo"),
    or `sentence`, the document's sentence stating it ("Vokira lives in Oslo."), which is how a pretrained chat
    model answers with the document in context; then records carry it as `reply`. Accuracy always scores `answer`.
    """
    if reply not in ("answer", "sentence"):
        raise ValueError(f"reply={reply!r} must be 'answer' or 'sentence'")
    records = []
    for i, d in enumerate(synthetic_documents(num_docs, seed=seed, held_out=held_out, **params)):
        for qa in d["qas"]:
            rec = {"doc_id": i, "document": d["document"], "question": qa["question"], "answer": qa["answer"]}
            if reply == "sentence":
                rec["reply"] = qa["sentence"]
            records.append(rec)
    return records
