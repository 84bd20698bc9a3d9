"""Locality: a document's generated LoRA should leave the model's answers about *other* entities as they were.

Knowledge editing's locality term (ROME, MEMIT: a KL on unrelated prompts, so that an edit acts on its own subject)
for D2L. Each training question is paired with a question of the same kind about another training document's
entity (`other_entity_pairs`, the pairing of the evaluation's `d2l_other_entity` control); with the question's own
document's LoRA applied, the model's next-token distributions over that other question's reference reply are pulled
to the base model's without any LoRA: KL(base || base + LoRA), full vocabulary, mean over the reply's tokens
(`algo.locality_coef`), or over the answer's tokens only (`algo.locality_span=answer`: where a wrong value shows,
weighted more at the same coefficient). CE alone never asks a LoRA about another entity, and a LoRA learns to
answer its kind of question with its own document's value for any entity (experiments/d2l_smollm2/LOG.md,
"binding").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from posttrain.algos.d2l.config import LOCALITY_SPANS
from posttrain.algos.d2l.monitor import document_index
from posttrain.data.chat import IGNORE_INDEX
from posttrain.errors import DataError


def other_entity_pairs(records: list[dict[str, Any]], doc_index: list[int], n_docs: int) -> list[int | None]:
    """For each question j: a question of the same `kind` about another document (the first document after j's
    that has one), or None (records without kinds, or no such question)."""
    by_doc_kind = {(doc_index[k], r.get("kind")): k for k, r in enumerate(records)}
    pairs: list[int | None] = []
    for j, r in enumerate(records):
        found = None
        if r.get("kind") is not None:
            for step in range(1, n_docs):
                found = by_doc_kind.get(((doc_index[j] + step) % n_docs, r["kind"]))
                if found is not None:
                    break
        pairs.append(found)
    return pairs


def answer_only(labels: list[int], answer: str, tokenizer: Any) -> list[int] | None:
    """`labels` with every labelled token outside the answer's tokens set to IGNORE_INDEX (the first occurrence of
    the answer tokenized alone or after a space among the labelled ids), or None when the answer's tokens do not
    occur there (a merge across its boundary)."""
    ids = [t for t in labels if t != IGNORE_INDEX]
    where = [k for k, t in enumerate(labels) if t != IGNORE_INDEX]
    for text in (answer, " " + answer):
        want = tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(len(ids) - len(want) + 1):
            if want and ids[start : start + len(want)] == want:
                keep = set(where[start : start + len(want)])
                return [t if k in keep else IGNORE_INDEX for k, t in enumerate(labels)]
    return None


def attach_other_entity(
    rows: list[dict[str, Any]], records: list[dict[str, Any]], span: str = "reply", tokenizer: Any = None
) -> int:
    """Give each featurized training row `o_input_ids`/`o_labels`, the student view of its paired question
    (`other_entity_pairs`), and `o_keep` (False where it has none: the row's own view stands in, weighted 0).
    `span="answer"` keeps only the answer's tokens of the paired reply labelled (where they are found; else the
    whole reply): the KL then weighs only the stated value. Returns the number of rows paired; raises when none is
    (questions without kinds)."""
    if span not in LOCALITY_SPANS:
        raise ValueError(f"locality span {span!r} is not one of {', '.join(LOCALITY_SPANS)}")
    docs, index = document_index(records)
    pairs = other_entity_pairs(records, index, len(docs))
    if all(p is None for p in pairs):
        raise DataError(
            "algo.locality_coef > 0 needs questions of the same kind about other documents (records with a `kind`, "
            "e.g. data=d2l_facts); these have none"
        )
    spans: dict[int, list[int]] = {}
    for row, p in zip(rows, pairs, strict=True):
        other = row if p is None else rows[p]
        labels = other["labels"]
        if span == "answer" and p is not None:
            if p not in spans:
                spans[p] = answer_only(labels, records[p]["answer"], tokenizer) or labels
            labels = spans[p]
        row.update(o_input_ids=other["input_ids"], o_labels=labels, o_keep=p is not None)
    return sum(p is not None for p in pairs)


def locality_kl(with_lora: torch.Tensor, base: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean over the kept positions of KL(base || with_lora), from logits `[n, V]` at the same n positions;
    `keep[n]` selects the positions of paired rows. 0 (with a gradient path) when none is kept."""
    if not bool(keep.any()):
        return with_lora.sum() * 0.0
    log_q = F.log_softmax(with_lora[keep].float(), dim=-1)
    log_p = F.log_softmax(base[keep].float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()
