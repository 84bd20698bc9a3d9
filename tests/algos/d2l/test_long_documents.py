"""Long documents: the hypernet and the in-context teacher read exactly the same document tokens. A document
longer than `algo.encoder.max_doc_length` is split into chunks (at most `algo.encoder.max_chunks`, the rest is
cut for both readers), each chunk gets its own LoRA and a document's LoRA is their concatenation along the rank."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.d2l.batching import D2LCollator
from posttrain.data.d2l import document_chunks, featurize


def _record(n_facts: int) -> dict[str, str]:
    return {
        "document": " ".join(f"Fact {i}: Bazoru likes teal number {i}." for i in range(n_facts)),
        "question": "What color does Bazoru like?",
        "answer": "teal",
    }


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


@pytest.mark.parametrize("max_chunks, n_facts", [(1, 4), (3, 12)])
def test_hypernet_and_teacher_read_the_same_document_tokens(d2l_model, max_chunks, n_facts):
    """A 64-token chunk; the student's 256 tokens leave the teacher room for the whole document, so a teacher
    that reads more than the hypernet does so silently."""
    tok = d2l_model().tokenizer
    rec = _record(n_facts)
    doc_ids = tok(rec["document"], add_special_tokens=False)["input_ids"]
    assert len(doc_ids) > 64 * max_chunks  # the document is cut in both cases
    kwargs = {} if max_chunks == 1 else {"max_chunks": max_chunks}  # 1: the default
    row = featurize(rec, tok, 256, 64, **kwargs)
    assert row["ctx_ids"] == doc_ids[: 64 * max_chunks]
    # the teacher reads those tokens and not one more: the same view as a record holding only the visible part
    assert _contains(row["t_input_ids"], row["ctx_ids"])
    cut = featurize({**rec, "document": tok.decode(row["ctx_ids"])}, tok, 256, 64, **kwargs)
    assert row["t_input_ids"] == cut["t_input_ids"] and row["t_labels"] == cut["t_labels"]
    assert not _contains(row["t_input_ids"], doc_ids[: 64 * max_chunks + 1])
    # the hypernet's input: chunks of at most 64 tokens that together are exactly ctx_ids
    batch = D2LCollator(tok.pad_token_id)([row])
    chunks = [ids[mask.bool()].tolist() for ids, mask in zip(batch["ctx_ids"], batch["ctx_mask"])]
    assert len(chunks) == max_chunks and all(0 < len(c) <= 64 for c in chunks)
    assert [t for chunk in chunks for t in chunk] == row["ctx_ids"]
    assert batch["ctx_doc"].tolist() == [0] * max_chunks


def _scale(model):
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)


@pytest.mark.parametrize("bias", [0, 2])
def test_a_chunked_documents_lora_is_its_chunks_loras_along_the_rank(d2l_model, bias):
    model = d2l_model("algo.encoder.max_doc_length=16", "algo.encoder.max_chunks=3", f"algo.bias_lora_rank={bias}")
    _scale(model)
    r = model.spec.rank
    long, short = "Bazoru lives in Oslo. Bazoru likes teal.", "Kimelo owns a fox."  # 40 and 18 bytes: 3 and 2 chunks
    lora = model.internalize([long, short])
    ids = model.tokenizer(long, add_special_tokens=False)["input_ids"]
    parts = [model.internalize(model.tokenizer.decode(ids[i : i + 16])) for i in range(0, len(ids), 16)]
    alone = model.internalize(short)
    for path in model.wrappers:
        a, b = lora.A[path], lora.B[path]
        assert a.shape[1] == 3 * r + bias and b.shape[1] == 3 * r + bias
        torch.testing.assert_close(a[0, : 3 * r], torch.cat([p.A[path][0, :r] for p in parts]))
        torch.testing.assert_close(b[0, : 3 * r], torch.cat([p.B[path][0, :r] for p in parts]))
        torch.testing.assert_close(a[0, 3 * r :], parts[0].A[path][0, r:])  # the bias LoRA once, not per chunk
        # the 2-chunk document: its own rows, then zero rows (no update), then the bias
        torch.testing.assert_close(a[1, : 2 * r], alone.A[path][0, : 2 * r])
        assert not a[1, 2 * r : 3 * r].any() and not b[1, 2 * r : 3 * r].any()
    assert float(lora.select([1]).l1()) == pytest.approx(float(alone.l1()), rel=1e-6)  # padding is not counted
    # padded to a batch with a longer document, the short document's LoRA changes no logit
    q = torch.tensor([model.tokenizer("What pet does Kimelo own?", add_special_tokens=False)["input_ids"]])
    model.apply_lora(alone)
    ref = model.base(input_ids=q, use_cache=False).logits
    model.apply_lora(lora.select([1]))
    torch.testing.assert_close(model.base(input_ids=q, use_cache=False).logits, ref, atol=1e-6, rtol=1e-5)
    model.reset()


def test_chunked_documents_train_and_evaluate(d2l_cfg, d2l_model):
    from posttrain.algos.d2l.evaluate import evaluate_model
    from posttrain.algos.d2l.loss import d2l_loss
    from posttrain.data.d2l import synthetic_qa

    model = d2l_model("algo.encoder.max_doc_length=16", "algo.encoder.max_chunks=2")
    _scale(model)
    records = synthetic_qa(4, seed=0, held_out=True)
    rows = [featurize(r, model.tokenizer, 128, 16, max_chunks=2) for r in records]
    batch = D2LCollator(model.tokenizer.pad_token_id)(rows)
    assert len(batch["ctx_ids"]) == 2 * len(rows)  # every synthetic document is longer than 16 bytes
    loss, _ = d2l_loss(model, batch)
    loss.backward()
    assert model.hypernet.head_A["q_proj"].grad.abs().sum() > 0
    out = evaluate_model(model, records, 128, generate=False)
    assert all(out[c]["answer_loss"] == out[c]["answer_loss"] for c in ("d2l", "d2l_other_doc", "in_context"))
    assert out["d2l"]["answer_loss"] != out["d2l_other_doc"]["answer_loss"]


SENTENCES = ["Bazoru lives in Oslo.", " Bazoru likes teal!", " Kimelo owns a fox?", "\nKimelo was born in 1990."]


def test_sentence_chunks_hold_one_sentence_each(d2l_model):
    """`chunking=sentences`: a chunk per sentence (ended by . ! or ? before whitespace), together the whole text."""
    tok = d2l_model().tokenizer
    doc = "".join(SENTENCES)
    chunks, text = document_chunks(doc, tok, 64, 8, "sentences")
    assert [tok.decode(c) for c in chunks] == SENTENCES and text == doc
    assert [t for c in chunks for t in c] == tok(doc, add_special_tokens=False)["input_ids"]
    # a sentence longer than a chunk goes on in the next one; the next sentence starts a chunk of its own
    chunks, _ = document_chunks(doc, tok, 20, 8, "sentences")
    assert [tok.decode(c) for c in chunks] == [
        "Bazoru lives in Oslo",
        ".",
        *SENTENCES[1:3],
        "\nKimelo was born in ",
        "1990.",
    ]
    # cut after max_chunks chunks, inside a sentence: the text is what the chunks hold, which the teacher reads
    chunks, text = document_chunks(doc, tok, 20, 5, "sentences")
    assert text == "".join(SENTENCES[:3]) + "\nKimelo was born in " == tok.decode([t for c in chunks for t in c])
    record = {"document": doc, "question": "Where does Bazoru live?", "answer": "Oslo"}
    row = featurize(record, tok, 256, 20, 5, "sentences")
    assert row["ctx_chunks"] == chunks and row["ctx_ids"] == [t for c in chunks for t in c]
    assert _contains(row["t_input_ids"], tok(text, add_special_tokens=False)["input_ids"])
    assert not _contains(row["t_input_ids"], tok(doc[: len(text) + 3], add_special_tokens=False)["input_ids"])
    with pytest.raises(ValueError, match="chunking='words'"):
        document_chunks(doc, tok, 20, 5, "words")


def test_a_sentence_chunked_documents_lora_is_its_sentences_loras(d2l_model):
    """Read by sentence, a document's LoRA is its statements' own LoRAs along the rank (so their update is the sum
    of theirs), whatever the chunk length; read by tokens, chunk boundaries cut through the statements."""
    model = d2l_model("algo.encoder.max_doc_length=32", "algo.encoder.max_chunks=4", "algo.encoder.chunking=sentences")
    assert model.reading == {"max_doc_length": 32, "max_chunks": 4, "chunking": "sentences"}
    _scale(model)
    r = model.spec.rank
    lora = model.internalize("".join(SENTENCES[:3]))
    parts = [model.internalize(s) for s in SENTENCES[:3]]
    for path in model.wrappers:
        torch.testing.assert_close(lora.A[path][0], torch.cat([p.A[path][0] for p in parts]))
        torch.testing.assert_close(lora.B[path][0], torch.cat([p.B[path][0] for p in parts]))
    tokens = d2l_model("algo.encoder.max_doc_length=32", "algo.encoder.max_chunks=4")
    assert tokens.internalize("".join(SENTENCES[:3])).A[path].shape[1] == 2 * r  # 58 bytes: 2 chunks, not 3
