"""The binding margins (`binding.py`): under question j's document's LoRA, log P(reply stating the LoRA's value)
minus log P(reply stating the paired document's value), on j's own question (`d2l`) and on the paired question about
another entity (`d2l_other_entity`); checked against NLLs computed by hand with the same LoRA."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.d2l.batching import view_batch
from posttrain.algos.d2l.binding import MARGIN, PREFERRED, swapped_view, value_margins
from posttrain.algos.d2l.evaluate import answer_nll, evaluate_model
from posttrain.algos.d2l.locality import other_entity_pairs
from posttrain.algos.d2l.monitor import document_index
from posttrain.data.d2l import fact_qa, featurize


def test_the_swapped_view_states_the_other_value_in_the_same_reply(d2l_model):
    tok = d2l_model().tokenizer
    rec = {"question": "How many papers has Ana Bel published?", "answer": "248", "reply": "Ana Bel has 248 papers."}
    view = swapped_view(rec, "17", tok, 128)
    assert view is not None
    labelled = tok.decode([t for t in view["labels"] if t != -100])
    assert labelled.startswith("Ana Bel has 17 papers.") and "248" not in labelled
    assert swapped_view(rec, "248", tok, 128) is None  # the same value: no contrast
    assert swapped_view(dict(rec, reply="Ana Bel has many papers."), "17", tok, 128) is None


def test_the_margin_is_signed_for_the_loras_own_value():
    per = {"d2l": {0: {"nll": 3.0}, 1: {"nll": 5.0}}, "d2l_other_entity": {0: {"nll": 4.0}}}
    value_margins({"d2l": {0: 7.0, 1: 4.5}, "d2l_other_entity": {0: 1.5}}, per)
    # d2l: the gold reply is the LoRA's value; other entity: the swapped reply is
    assert per["d2l"][0][MARGIN] == 4.0 and per["d2l"][0][PREFERRED] == 1.0
    assert per["d2l"][1][MARGIN] == -0.5 and per["d2l"][1][PREFERRED] == 0.0
    assert per["d2l_other_entity"][0][MARGIN] == 2.5 and per["d2l_other_entity"][0][PREFERRED] == 1.0


def test_evaluation_reports_the_margins_from_each_questions_own_lora(d2l_model):
    model = d2l_model()
    torch.manual_seed(0)
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)  # a LoRA that differs by document
    tok = model.tokenizer
    records = fact_qa(3, seed=0, held_out=True, num_facts=3, single_hop=3, two_hop=0, tokenizer=tok)
    out = evaluate_model(model, records, 128, max_new_tokens=2, conditions=["d2l", "d2l_other_entity"])
    docs, doc = document_index(records)
    pairs = other_entity_pairs(records, doc, len(docs))
    per = out["per_question"]
    checked = 0
    for j, p in enumerate(pairs):
        if p is None:
            assert MARGIN not in per[j]["d2l"] and "d2l_other_entity" not in per[j]
            continue
        lora = model.internalize(docs[doc[j]])

        def nll(view, lora=lora):
            batch = view_batch([{"input_ids": view["input_ids"], "labels": view["labels"]}], tok.pad_token_id)
            return answer_nll(model, batch, lora)[0][0]

        own_j, own_p = (featurize(records[k], tok, 128, model.max_doc_length) for k in (j, p))
        carry = nll(swapped_view(records[j], records[p]["answer"], tok, 128)) - nll(own_j)
        leak = nll(own_p) - nll(swapped_view(records[p], records[j]["answer"], tok, 128))
        assert per[j]["d2l"][MARGIN] == pytest.approx(carry, rel=1e-4, abs=1e-4)
        assert per[j]["d2l_other_entity"][MARGIN] == pytest.approx(leak, rel=1e-4, abs=1e-4)
        assert abs(carry) > 1e-3 and abs(leak) > 1e-3  # the two values differ in likelihood: a real contrast
        checked += 1
    assert checked > 3
    for cond in ("d2l", "d2l_other_entity"):
        margins = [q[cond][MARGIN] for q in per if cond in q and MARGIN in q[cond]]
        assert len(margins) == checked and out[cond][MARGIN] == pytest.approx(sum(margins) / checked)
        assert out[cond][f"{MARGIN}_ci95"][0] <= out[cond][MARGIN] <= out[cond][f"{MARGIN}_ci95"][1]
        assert out[cond][PREFERRED] == pytest.approx(sum(m > 0 for m in margins) / checked)
