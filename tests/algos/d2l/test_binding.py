"""The binding margins (`binding.py`): under question j's document's LoRA, log P(reply stating the LoRA's value)
minus log P(reply stating the paired document's value), on j's own question (`d2l`) and on the paired question about
another entity (`d2l_other_entity`); checked against NLLs computed by hand with the same LoRA."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.d2l.batching import view_batch
from posttrain.algos.d2l.binding import MARGIN, PREFERRED, swapped_record, value_margins, with_distractors
from posttrain.algos.d2l.condition import answer_nll
from posttrain.algos.d2l.evaluate import evaluate_model
from posttrain.algos.d2l.locality import other_entity_pairs
from posttrain.algos.d2l.monitor import document_index
from posttrain.data.d2l import SENTENCE_END, document_chunks, fact_qa, featurize, in_context_view, student_view


def test_the_swapped_record_states_the_other_value_in_the_same_reply(d2l_model):
    tok = d2l_model().tokenizer
    rec = {"question": "How many papers has Ana Bel published?", "answer": "248", "reply": "Ana Bel has 248 papers."}
    swapped = swapped_record(rec, "17")
    assert swapped is not None and swapped["reply"] == "Ana Bel has 17 papers." and rec["reply"].endswith("248 papers.")
    labelled = tok.decode([t for t in student_view(swapped, tok, 128)["labels"] if t != -100])
    assert labelled.startswith("Ana Bel has 17 papers.") and "248" not in labelled
    assert swapped_record(rec, "248") is None  # the same value: no contrast
    assert swapped_record(dict(rec, reply="Ana Bel has many papers."), "17") is None


def test_the_margin_is_signed_for_the_loras_own_value():
    per = {"d2l": {0: {"nll": 3.0}, 1: {"nll": 5.0}}, "d2l_other_entity": {0: {"nll": 4.0}}}
    per |= {"in_context": {0: {"nll": 1.0}}, "in_context_other_entity": {0: {"nll": 2.0}}}
    value_margins(
        {
            "d2l": {0: 7.0, 1: 4.5},
            "d2l_other_entity": {0: 1.5},
            "in_context": {0: 9.0},
            "in_context_other_entity": {0: 2.25},
        },
        per,
    )
    # own question: the gold reply states the carrier's value; other entity: the swapped reply does
    assert per["d2l"][0][MARGIN] == 4.0 and per["d2l"][0][PREFERRED] == 1.0
    assert per["d2l"][1][MARGIN] == -0.5 and per["d2l"][1][PREFERRED] == 0.0
    assert per["d2l_other_entity"][0][MARGIN] == 2.5 and per["d2l_other_entity"][0][PREFERRED] == 1.0
    assert per["in_context"][0][MARGIN] == 8.0 and per["in_context_other_entity"][0][MARGIN] == -0.25
    assert per["in_context_other_entity"][0][PREFERRED] == 0.0


BOUND = ("d2l", "d2l_other_entity", "in_context", "in_context_other_entity")


def test_evaluation_reports_the_margins_from_each_questions_own_carrier(d2l_model):
    model = d2l_model()
    torch.manual_seed(0)
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)  # a LoRA that differs by document
    tok = model.tokenizer
    records = fact_qa(3, seed=0, held_out=True, num_facts=3, single_hop=3, two_hop=0, tokenizer=tok)
    out = evaluate_model(model, records, 128, max_new_tokens=2, conditions=list(BOUND))
    docs, doc = document_index(records)
    pairs = other_entity_pairs(records, doc, len(docs))
    per = out["per_question"]
    checked = 0
    for j, p in enumerate(pairs):
        if p is None:
            assert MARGIN not in per[j]["d2l"] and MARGIN not in per[j]["in_context"]
            assert "d2l_other_entity" not in per[j] and "in_context_other_entity" not in per[j]
            continue
        lora = model.internalize(docs[doc[j]])
        seen = document_chunks(docs[doc[j]], tok, **model.reading)[1]
        width = len(featurize(records[j], tok, 128, **model.reading)["ctx_ids"])

        def nll(view, lora=lora):
            batch = view_batch([{"input_ids": view["input_ids"], "labels": view["labels"]}], tok.pad_token_id)
            return answer_nll(model, batch, lora)[0][0]

        own_j, own_p = (student_view(records[k], tok, 128) for k in (j, p))
        swap_j, swap_p = (
            swapped_record(records[j], records[p]["answer"]),
            swapped_record(records[p], records[j]["answer"]),
        )
        expected = {
            "d2l": nll(student_view(swap_j, tok, 128)) - nll(own_j),
            "d2l_other_entity": nll(own_p) - nll(student_view(swap_p, tok, 128)),
        }
        # the same contrasts with j's document read in context instead of its LoRA (no LoRA)
        ic_j, ic_p = (in_context_view(seen, r, tok, 128, width) for r in (records[j], records[p]))
        expected["in_context"] = nll(in_context_view(seen, swap_j, tok, 128, width), None) - nll(ic_j, None)
        expected["in_context_other_entity"] = nll(ic_p, None) - nll(
            in_context_view(seen, swap_p, tok, 128, width), None
        )
        for cond, margin in expected.items():
            assert per[j][cond][MARGIN] == pytest.approx(margin, rel=1e-4, abs=1e-4), cond
            assert abs(margin) > 1e-3  # the two values differ in likelihood: a real contrast
        assert per[j]["in_context_other_entity"]["nll"] == pytest.approx(nll(ic_p, None), rel=1e-4)
        checked += 1
    assert checked > 3
    for cond in BOUND:
        margins = [q[cond][MARGIN] for q in per if cond in q and MARGIN in q[cond]]
        assert len(margins) == checked and out[cond][MARGIN] == pytest.approx(sum(margins) / checked)
        assert out[cond][f"{MARGIN}_ci95"][0] <= out[cond][MARGIN] <= out[cond][f"{MARGIN}_ci95"][1]
        assert out[cond][PREFERRED] == pytest.approx(sum(m > 0 for m in margins) / checked)
    for q, p in zip(per, pairs):  # the in-context control is scored against the other entity's answer
        if p is not None:
            assert "own_fact" in q["in_context_other_entity"] and q["in_context_other_entity"]["correct"] in (0.0, 1.0)


def test_distractors_put_each_pairs_fact_into_the_document(d2l_model):
    tok = d2l_model().tokenizer
    records = fact_qa(4, seed=0, held_out=True, num_facts=3, single_hop=3, two_hop=0, tokenizer=tok, reply="sentence")
    docs, doc = document_index(records)
    pairs = other_entity_pairs(records, doc, len(docs))
    out = with_distractors(records, seed=0)
    new_docs, new_doc = document_index(out)
    assert new_doc == doc and other_entity_pairs(out, new_doc, len(new_docs)) == pairs  # the same pairing after
    for d, (before, after) in enumerate(zip(docs, new_docs, strict=True)):
        sentences = [s.strip() for s in SENTENCE_END.split(after)]
        own = [s.strip() for s in SENTENCE_END.split(before)]
        added = [records[p]["reply"] for j, p in enumerate(pairs) if doc[j] == d and p is not None]
        assert added and sorted(sentences) == sorted(own + added)  # its own facts, and one sentence per pair
        assert [s for s in sentences if s in own] == own  # in their order
    for j, r in enumerate(out):
        assert r["question"] == records[j]["question"] and r["answer"] == records[j]["answer"]
        assert "answer_start" not in r and "evidence_end" not in r  # offsets the insertions moved
    assert with_distractors(records, seed=0) == out and with_distractors(records, seed=1) != out  # seeded placement
    with pytest.raises(ValueError, match="paired questions"):
        with_distractors([dict(r, kind=None) for r in records])
    with pytest.raises(ValueError, match="reply sentences"):
        with_distractors([{k: v for k, v in r.items() if k != "reply"} for r in records])
