"""D2L data (synthetic documents, SQuAD-style loader, tokenized views), teacher top-k cache, eval metrics."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.algos.d2l.evaluate import normalize, rouge_l
from posttrain.algos.d2l.loss import topk_kl
from posttrain.data.chat import IGNORE_INDEX
from posttrain.data.d2l import featurize, load_squad, synthetic_documents, synthetic_qa
from posttrain.errors import DataError


def test_synthetic_documents_are_deterministic_and_answerable():
    a = synthetic_documents(20, seed=3, num_attributes=3)
    assert a == synthetic_documents(20, seed=3, num_attributes=3)
    assert a != synthetic_documents(20, seed=4, num_attributes=3)
    for d in a:
        assert len(d["qas"]) == 3
        for qa in d["qas"]:
            assert qa["answer"] in d["document"] and d["entity"] in qa["question"]


def test_held_out_entities_never_appear_in_training():
    train = {d["entity"] for d in synthetic_documents(500, seed=0)}
    held = {d["entity"] for d in synthetic_documents(100, seed=0, held_out=True)}
    assert train and held and not train & held
    assert len(synthetic_qa(10, seed=0, num_attributes=2)) == 20


def test_featurize_puts_labels_on_the_answer_only(d2l_model):
    model = d2l_model()
    rec = synthetic_qa(1, seed=0)[0]
    row = featurize(rec, model.tokenizer, 128, 256)
    answer = [t for t in row["labels"] if t != IGNORE_INDEX]
    t_answer = [t for t in row["t_labels"] if t != IGNORE_INDEX]
    assert answer == t_answer
    assert model.tokenizer.decode(answer, skip_special_tokens=True) == rec["answer"]
    assert model.tokenizer.decode(row["ctx_ids"]) == rec["document"]
    assert len(row["t_input_ids"]) > len(row["input_ids"]) + len(row["ctx_ids"]) - 5  # the teacher reads the doc


def test_squad_loader_local_files(tmp_path):
    nested = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Paris is in France.",
                        "qas": [
                            {"question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]},
                            {"question": "Unanswerable?", "answers": []},
                        ],
                    }
                ],
            }
        ]
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(nested))
    assert load_squad(str(path)) == [
        {"doc_id": 0, "document": "Paris is in France.", "question": "Where is Paris?", "answer": "France"}
    ]
    flat = tmp_path / "squad.jsonl"
    rows = [
        {"context": f"Doc {i}.", "question": f"Q{i}?", "answers": {"text": [f"A{i}"], "answer_start": [0]}}
        for i in range(3)
    ]
    flat.write_text("\n".join(json.dumps(r) for r in rows))
    recs = load_squad(str(flat))
    assert [r["answer"] for r in recs] == ["A0", "A1", "A2"] and [r["doc_id"] for r in recs] == [0, 1, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"context": "x", "question": "y"}))
    with pytest.raises(DataError, match="answers"):
        load_squad(str(bad))


def test_squad_jsonl_through_the_data_config(compose, tmp_path):
    from posttrain.data.d2l import d2l_records

    flat = tmp_path / "squad.jsonl"
    rows = [{"context": f"Doc {i}.", "question": f"Q{i}?", "answers": [f"A{i}"]} for i in range(10)]
    flat.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = compose(
        "algo=d2l",
        "data=d2l_squad",
        "data.source=jsonl",
        f"data.path={flat}",
        "data.num_train=5",
        "data.num_eval=3",
        "data.params={}",
    )
    train, held = d2l_records(cfg.data)
    assert [r["answer"] for r in train] == ["A0", "A1", "A2", "A3", "A4"]
    assert [r["answer"] for r in held] == ["A7", "A8", "A9"]


def test_rouge_l_and_normalize():
    assert normalize("  The  Cat!") == "the cat"
    assert rouge_l("the cat sat", "the cat sat") == 1.0
    assert rouge_l("cat", "dog") == 0.0
    # LCS("a b c d", "a c d e") = 3 -> P = R = 3/4
    assert rouge_l("a b c d", "a c d e") == pytest.approx(0.75)


def test_topk_kl_is_zero_on_the_teachers_own_distribution():
    logits = torch.randn(5, 40)
    logp = torch.log_softmax(logits, -1)
    vals, idx = logp.topk(40, dim=-1)
    assert float(topk_kl(logits, idx, vals)) == pytest.approx(0.0, abs=1e-5)
    assert float(topk_kl(torch.randn(5, 40), idx, vals)) > 0.05


def test_teacher_topk_is_cached(tmp_path, d2l_cfg, d2l_model):
    from posttrain.algos.d2l.teacher import attach_teacher

    cfg = d2l_cfg()
    model = d2l_model()
    rows = [featurize(r, model.tokenizer, 128, 256) for r in synthetic_qa(3, seed=0)]
    path = attach_teacher(model, rows, k=4, temperature=1.0, cache_dir=tmp_path, key_parts={"x": 1})
    assert path.is_file() and path.suffix == ".safetensors"
    n_answer = sum(t != IGNORE_INDEX for t in rows[0]["labels"])
    assert rows[0]["t_idx"].shape == (n_answer, 4)
    first = [r["t_logp"].clone() for r in rows]
    again = [featurize(r, model.tokenizer, 128, 256) for r in synthetic_qa(3, seed=0)]
    with torch.no_grad():  # a cache hit never recomputes (a changed model would give other numbers)
        model.base.lm_head.weight.mul_(3.0)
    assert attach_teacher(model, again, k=4, temperature=1.0, cache_dir=tmp_path, key_parts={"x": 1}) == path
    assert all(torch.equal(a["t_logp"], b) for a, b in zip(again, first))
    del cfg


def test_teacher_cache_is_keyed_by_the_chat_template_and_tokenizer(d2l_cfg, tmp_path, monkeypatch):
    """Same config, edited chat template (or tokenizer): the teacher reads other tokens, so the cache must miss."""
    from posttrain.algos.d2l import api
    from posttrain.algos.d2l.teacher import teacher_topk

    build = api.build_model
    edit: dict = {}

    def build_edited(cfg):
        model = build(cfg)
        if "template" in edit:
            model.tokenizer.chat_template = edit["template"] + model.tokenizer.chat_template
        if "tokens" in edit:
            model.tokenizer.add_tokens(edit["tokens"])
        return model

    monkeypatch.setattr(api, "build_model", build_edited)
    cfg = d2l_cfg("algo.kl_coef=0.5", "algo.kl_top_k=4", "data.num_train=3", "trainer.max_steps=1")
    caches = tmp_path / "cache"

    def attached():
        trainer = api.build_trainer(cfg, tmp_path)
        rows = trainer.train_dataset.rows
        fresh = teacher_topk(trainer.model, rows, 4)
        assert all(torch.equal(r["t_logp"], lp) for r, (_, lp) in zip(rows, fresh)), "stale teacher cache"
        return {p.name for p in caches.iterdir()}

    first = attached()
    assert len(first) == 1 and attached() == first  # unchanged: a hit
    edit["template"] = "Answer from the document.\n"
    second = attached()
    assert len(second) == 2  # the edited template is a miss (and its numbers are its own, checked above)
    edit["tokens"] = ["<|doc|>"]  # a changed vocabulary (here: the inputs happen to tokenize the same)
    assert len(attached()) == 3
