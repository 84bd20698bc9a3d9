"""Binding, measured by likelihood: does a carrier of a document (its generated LoRA, or the document in context)
prefer the document's value only for the document's own entity?

For a question j and the same kind of question p about another document's entity (`other_entity_pairs`), with j's
document as the carrier, the margin is log P(reply stating j's document's value) - log P(the same reply stating
p's document's value), summed over the reply's tokens:
- on j's own question (`d2l`, `in_context`): j's reply against it with p's value in its place. Positive: the carrier
  holds its fact;
- on p's question (`d2l_other_entity`, `in_context_other_entity`): p's reply with j's value in its place against p's
  own. Positive: the carrier states its fact about the wrong entity (no binding).
A carrier that does not depend on its document scores ~0 on both in expectation (the paired values are draws of the
same kind), one that binds its facts scores high on the first and ~0 on the second, one that does not bind about the
same on both. The in-context pair is the reference: what the base model does with the document before it. Unlike
accuracy and `own_fact`, which need the value generated exactly, the margins move before the greedy answers do.

Asked about an entity its document does not mention, even the base model reading the document states the document's
value. `with_distractors` makes the test one that reading can pass: each document also states its pairs' facts (the
paired questions' reply sentences), so both values are in the document and only the entity named in the question
tells them apart; a carrier that binds then scores high on its own question, low on the other entity's, and answers
the other entity's question right.
"""

from __future__ import annotations

import random
from typing import Any

from posttrain.algos.d2l.locality import other_entity_pairs
from posttrain.algos.d2l.monitor import document_index
from posttrain.data.d2l import SENTENCE_END

MARGIN, PREFERRED = "lora_value_margin", "lora_value_preferred"
OTHER_ENTITY = {"d2l": "d2l_other_entity", "in_context": "in_context_other_entity"}  # own question -> other's
# condition -> sign of (swapped NLL - gold NLL): on the carrier's own question the gold reply states its value
SIGNS = {**dict.fromkeys(OTHER_ENTITY, 1.0), **dict.fromkeys(OTHER_ENTITY.values(), -1.0)}


def swapped_record(record: dict[str, Any], value: str) -> dict[str, Any] | None:
    """`record` with `value` in place of its answer in the reference reply; None when the reply does not contain
    the answer or `value` is the answer."""
    reply = record.get("reply") or record["answer"]
    if not record["answer"] or record["answer"] not in reply or value == record["answer"]:
        return None
    return dict(record, reply=reply.replace(record["answer"], value, 1))


def value_margins(swapped: dict[str, dict[int, float]], per: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Adds MARGIN and PREFERRED to the entries of `per[cond]` (cond: a key of SIGNS) whose swapped reply's NLL sum
    `swapped[cond]` has. On the carrier's own question the gold reply states its value; on the other entity's
    the swapped one does."""
    for cond, sign in SIGNS.items():
        for j, swap in swapped.get(cond, {}).items():
            margin = sign * (swap - float(per[cond][j]["nll"]))
            per[cond][j][MARGIN] = margin
            per[cond][j][PREFERRED] = float(margin > 0)


def with_distractors(records: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """`records` whose documents also state the facts of their questions' pairs (`other_entity_pairs`): each pair's
    reply sentence inserted at a random sentence boundary (seeded), one per pair, the sentences joined by single
    spaces. Character offsets into the document (`answer_start`, `evidence_end`) are dropped: the inserted
    sentences move them."""
    docs, doc_index = document_index(records)
    pairs = other_entity_pairs(records, doc_index, len(docs))
    if all(p is None for p in pairs):
        raise ValueError("distractors need paired questions: records with a `kind` in two or more documents")
    rng = random.Random(seed)
    rewritten = []
    for d, document in enumerate(docs):
        sentences = [piece.strip() for piece in SENTENCE_END.split(document) if piece.strip()]
        for j in (j for j, dj in enumerate(doc_index) if dj == d and pairs[j] is not None):
            reply = (records[pairs[j]].get("reply") or "").strip()  # type: ignore[index]  # pairs[j] is set
            if records[pairs[j]]["answer"] not in reply:  # type: ignore[index]
                raise ValueError(f"distractors need reply sentences that state the answer, not {reply!r}")
            sentences.insert(rng.randint(0, len(sentences)), reply)
        rewritten.append(" ".join(sentences))
    drop = ("answer_start", "evidence_end")
    return [
        {k: v for k, v in dict(r, document=rewritten[doc_index[j]]).items() if k not in drop}
        for j, r in enumerate(records)
    ]
