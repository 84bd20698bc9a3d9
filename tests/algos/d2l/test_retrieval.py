"""The retrieval and instructed in-context baselines of issue 62: BM25 puts the question's sentence in the window
where truncation cuts it off, fills no more than the window, reads a document that fits whole as it is, and both
conditions are evaluated only when named."""

from __future__ import annotations

import random

import pytest

from posttrain.algos.d2l.retrieval import ranked_sentences, retrieved_document
from posttrain.data.d2l import (
    INSTRUCTION,
    SENTENCE_END,
    in_context_prompt,
    in_context_view,
    student_view,
    window_document,
)
from posttrain.data.d2l.haystack import FILLER

FACT = "Dravel Kostirun was born in Port Zeamouth."
QUESTION = "Where was Dravel Kostirun born?"


def _long_record(n_filler: int, fact_at: int) -> dict[str, str]:
    rng = random.Random(0)
    sentences = [rng.choice(FILLER) for _ in range(n_filler)]
    sentences.insert(fact_at, FACT)
    return {"document": " ".join(sentences), "question": QUESTION, "answer": "Port Zeamouth"}


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text)]


def test_bm25_ranks_the_sentence_that_shares_the_questions_words_first():
    doc = f"The river was calm that year. {FACT} Dravel Kostirun founded Brisvaen Foundry. The sky was grey."
    ranked = ranked_sentences(doc, QUESTION)
    assert ranked[0] == (1, FACT)
    assert ranked[1] == (2, "Dravel Kostirun founded Brisvaen Foundry.")  # the name alone: second
    assert [pos for pos, _ in ranked[2:]] == [0, 3]  # no shared word: document order


def test_retrieval_reads_the_answer_beyond_the_window_and_fills_no_more_than_it(d2l_model):
    tok = d2l_model().tokenizer
    rec = _long_record(120, fact_at=100)  # the fact far past the window's first tokens
    window = 160
    cut = window_document(rec, tok, 64, window)
    got = retrieved_document(rec, tok, 64, window)
    assert FACT not in cut and FACT in got
    view = in_context_view(got, rec, tok, 64, len(tok(got, add_special_tokens=False)["input_ids"]))
    assert len(view["input_ids"]) <= window
    # the window is filled: the room left is less than one more sentence
    budget = window - len(student_view(rec, tok)["input_ids"]) - 4
    longest = max(len(tok(" " + s, add_special_tokens=False)["input_ids"]) for s in FILLER)
    assert budget - longest < len(tok(got, add_special_tokens=False)["input_ids"]) <= budget
    # the kept sentences are in the document's order: a subsequence of its sentences
    doc_sentences = iter(_sentences(rec["document"]))
    assert all(any(s == d for d in doc_sentences) for s in _sentences(got))


def test_a_document_that_fits_the_window_is_read_whole(d2l_model):
    tok = d2l_model().tokenizer
    rec = _long_record(3, fact_at=2)
    assert retrieved_document(rec, tok, 64, 4096) == rec["document"]


def test_the_instructed_prompt_holds_the_instruction_document_and_question():
    prompt = in_context_prompt("DOC", "Q?", instructed=True)
    assert prompt.startswith(INSTRUCTION) and prompt.index("DOC") < prompt.index("Q?")
    assert in_context_prompt("DOC", "Q?") == "DOC\n\nQ?"


def test_the_two_baselines_run_only_when_named(d2l_model):
    from posttrain.algos.d2l.evaluate import evaluate_model, wanted_conditions
    from posttrain.data.d2l.synthetic import synthetic_qa

    assert not {"in_context_instructed", "retrieval_bm25"} & set(wanted_conditions(None, None, True))
    model = d2l_model()
    records = synthetic_qa(3, seed=0, held_out=True)
    conds = ["in_context", "in_context_truncated", "in_context_instructed", "retrieval_bm25"]
    out = evaluate_model(model, records, 128, max_new_tokens=3, conditions=conds, context_window=4096)
    assert out["conditions"] == conds
    per = out["per_question"]
    # synthetic documents are one sentence long and fit: retrieval reads what truncation reads, so the same loss
    for p in per:
        assert p["retrieval_bm25"]["nll"] == pytest.approx(p["in_context_truncated"]["nll"], rel=1e-6)
        assert p["retrieved_answer"] == 1.0
    # the instruction changes what the model reads, so the answer's loss changes
    assert out["in_context_instructed"]["answer_loss"] != pytest.approx(out["in_context"]["answer_loss"])
