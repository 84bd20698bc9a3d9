"""Binding, measured by likelihood: does a generated LoRA prefer its document's value only for its own entity?

For a question j and the same kind of question p about another document's entity (`other_entity_pairs`), under
j's document's LoRA, the margin is log P(reply stating the LoRA's document's value) - log P(the same reply stating
the other document's value), summed over the reply's tokens:
- on j's own question (`d2l`): j's reply against it with p's value in its place. Positive: the LoRA carries its fact;
- on p's question (`d2l_other_entity`): p's reply with j's value in its place against p's own. Positive: the LoRA
  states its fact about the wrong entity (no binding).
A LoRA that does not depend on its document scores ~0 on both in expectation (the paired values are draws of the
same kind), one that binds its facts scores high on the first and ~0 on the second, one that does not bind about the
same on both. Unlike accuracy and `own_fact`, which need the value generated exactly, the margins move before the
greedy answers do.
"""

from __future__ import annotations

from typing import Any

from posttrain.data.d2l import student_view

MARGIN, PREFERRED = "lora_value_margin", "lora_value_preferred"


def swapped_view(record: dict[str, Any], value: str, tokenizer: Any, max_length: int) -> dict[str, list[int]] | None:
    """The student view (`input_ids`/`labels`) of `record`'s question with `value` in place of its answer in the
    reference reply; None when the reply does not contain the answer."""
    reply = record.get("reply") or record["answer"]
    if not record["answer"] or record["answer"] not in reply or value == record["answer"]:
        return None
    view = student_view(dict(record, reply=reply.replace(record["answer"], value, 1)), tokenizer, max_length)
    return {"input_ids": view["input_ids"], "labels": view["labels"]}


def value_margins(swapped: dict[str, dict[int, float]], per: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Adds MARGIN and PREFERRED to the entries of `per[cond]` (cond: `d2l`, `d2l_other_entity`) whose swapped
    reply's NLL sum `swapped[cond]` has. In `d2l` the gold reply states the LoRA's value; in `d2l_other_entity` the
    swapped one does."""
    for cond, sign in (("d2l", 1.0), ("d2l_other_entity", -1.0)):
        for j, swap in swapped.get(cond, {}).items():
            margin = sign * (swap - float(per[cond][j]["nll"]))
            per[cond][j][MARGIN] = margin
            per[cond][j][PREFERRED] = float(margin > 0)
