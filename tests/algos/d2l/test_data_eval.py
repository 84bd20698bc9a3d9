"""D2L data (synthetic documents, SQuAD-style loader, tokenized views), teacher top-k cache, evaluation."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.algos.d2l.loss import topk_kl
from posttrain.algos.d2l.scoring import contains_answer
from posttrain.analysis.stats import bootstrap_ci
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


def test_chat_attribute_set_is_its_own_table_with_disjoint_held_out_names():
    from posttrain.data.d2l.synthetic import ATTRIBUTE_SETS, CHAT_ATTRIBUTES

    docs = synthetic_documents(200, seed=0, num_attributes=3, attribute_set="chat")
    assert docs == synthetic_documents(200, seed=0, num_attributes=3, attribute_set="chat")
    assert docs != synthetic_documents(200, seed=0, num_attributes=3)  # the tiny set: other sentences and values
    for d in docs:
        assert set(d["facts"]) <= set(CHAT_ATTRIBUTES) and len(d["qas"]) == 3
        for qa in d["qas"]:
            assert qa["answer"] in d["document"] and d["entity"] in qa["question"]
    values = {a: {d["facts"][a] for d in docs if a in d["facts"]} for a in CHAT_ATTRIBUTES}
    assert all(len(v) >= 12 for v in values.values())  # 16 values per attribute, most drawn in 200 documents
    all_values = [v for _, _, vals in CHAT_ATTRIBUTES.values() for v in vals]
    assert len(all_values) == len(set(all_values)) == 96  # no value answers two attributes
    held = {d["entity"] for d in synthetic_documents(100, seed=0, held_out=True, attribute_set="chat")}
    assert held and not held & {d["entity"] for d in docs}
    with pytest.raises(ValueError, match="attribute_set"):
        synthetic_documents(2, attribute_set="nope")
    with pytest.raises(ValueError, match="unknown attributes"):
        synthetic_documents(2, attributes=["instrument"])  # a chat attribute is not in the tiny set
    assert set(ATTRIBUTE_SETS) == {"tiny", "chat"}


def test_chat_attribute_set_through_the_data_config(compose):
    from posttrain.data.d2l import d2l_records

    cfg = compose(
        "algo=d2l", "data=d2l_synth", "data.num_train=10", "data.num_eval=4", "+data.params.attribute_set=chat"
    )
    train, held = d2l_records(cfg.data)
    assert len(train) == 20 and len(held) == 8
    assert any(r["question"].startswith(("What animal", "Which instrument", "What does")) for r in train + held)


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


def test_sentence_replies_are_trained_and_answers_scored(d2l_model):
    model = d2l_model()
    short = synthetic_qa(2, seed=0, attribute_set="chat")
    long = synthetic_qa(2, seed=0, attribute_set="chat", reply="sentence")
    assert [r["answer"] for r in long] == [r["answer"] for r in short] and all("reply" not in r for r in short)
    for rec in long:
        assert rec["reply"] in rec["document"] and rec["answer"] in rec["reply"] and rec["reply"] != rec["answer"]
        row = featurize(rec, model.tokenizer, 128, 256)
        labelled = [t for t in row["labels"] if t != IGNORE_INDEX]
        assert model.tokenizer.decode(labelled, skip_special_tokens=True) == rec["reply"]
        assert labelled == [t for t in row["t_labels"] if t != IGNORE_INDEX]
    with pytest.raises(ValueError, match="reply"):
        synthetic_qa(1, reply="paragraph")


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
        {
            "doc_id": 0,
            "document": "Paris is in France.",
            "question": "Where is Paris?",
            "answer": "France",
            "answers": ["France"],
            "answer_start": 12,
        }
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


def test_bootstrap_ci_brackets_the_estimate():
    xs = [1.0] * 30 + [0.0] * 70
    lo, hi = bootstrap_ci(xs)
    assert 0.18 < lo < 0.3 < hi < 0.42  # binomial: 0.3 +- 1.96 * 0.046
    assert bootstrap_ci([1.0] * 10) == [1.0, 1.0]
    # a ratio: total NLL over total tokens, resampling questions (2 tokens each here -> 0.5 * mean)
    lo, hi = bootstrap_ci([2.0, 4.0, 6.0], [2.0, 2.0, 2.0])
    assert 1.0 <= lo < 2.0 < hi <= 3.0


def test_evaluation_reports_accuracy_with_cis_and_per_question_numbers(d2l_model):
    from posttrain.algos.d2l.evaluate import evaluate_model

    model = d2l_model()
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)
    records = synthetic_qa(3, seed=0, held_out=True)
    out = evaluate_model(model, records, 128, max_new_tokens=3)
    per = out["per_question"]
    assert len(per) == len(records) == 6
    assert [p["doc"] for p in per] == [0, 0, 1, 1, 2, 2] and [p["other_doc"] for p in per] == [1, 1, 2, 2, 0, 0]
    # no kinds (d2l_synth), no baseline steps: the four conditions of the default evaluation and the truncated one
    conditions = ["no_context", "in_context", "in_context_truncated", "d2l", "d2l_other_doc"]
    assert out["conditions"] == conditions
    for cond in conditions:
        entry = out[cond]
        acc = sum(p[cond]["correct"] for p in per) / len(per)
        assert entry["accuracy"] == acc
        assert entry["accuracy_ci95"][0] <= acc <= entry["accuracy_ci95"][1]
        loss = sum(p[cond]["nll"] for p in per) / sum(p[cond]["tokens"] for p in per)
        assert entry["answer_loss"] == pytest.approx(loss, rel=1e-6)
        assert entry["answer_loss_ci95"][0] <= loss <= entry["answer_loss_ci95"][1]
        assert all(p[cond]["correct"] == contains_answer(p[cond]["response"], p["answer"]) for p in per)
    # the same answer tokens in every condition; different LoRAs give different losses
    assert len({tuple(p[c]["tokens"] for p in per) for c in conditions}) == 1
    assert out["d2l"]["answer_loss"] != out["d2l_other_doc"]["answer_loss"]


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


def test_teacher_key_has_the_seed_only_for_random_init_models(compose):
    from posttrain.algos.d2l.api import teacher_key_parts

    tiny = [teacher_key_parts(compose("algo=d2l", "model=tiny_llama", f"seed={s}")) for s in (0, 1)]
    assert tiny[0] != tiny[1]  # a tiny model's weights are drawn from the seed
    real = [teacher_key_parts(compose("algo=d2l", "model=smollm2_135m", f"seed={s}")) for s in (0, 1)]
    assert real[0] == real[1] and "seed" not in real[0]  # pretrained weights: the seeds share the teacher
    assert real[0] != teacher_key_parts(compose("algo=d2l", "model=smollm2_135m", "model.fetch.sha256=0"))


def test_teacher_cache_dir_is_shared_between_run_dirs(d2l_cfg, tmp_path):
    from posttrain.algos.d2l import api

    shared = tmp_path / "shared"
    cfg = d2l_cfg("algo.kl_coef=0.5", "algo.kl_top_k=4", "data.num_train=3", f"algo.kl_cache_dir={shared}")
    first = api.build_trainer(cfg, tmp_path / "run1")
    files = list(shared.iterdir())
    assert len(files) == 1 and not (tmp_path / "run1" / "cache").exists()
    stamp = files[0].stat().st_mtime_ns
    second = api.build_trainer(cfg, tmp_path / "run2")  # another run dir: a hit, nothing rewritten
    assert list(shared.iterdir()) == files and files[0].stat().st_mtime_ns == stamp
    for a, b in zip(first.train_dataset.rows, second.train_dataset.rows):
        assert torch.equal(a["t_logp"], b["t_logp"]) and torch.equal(a["t_idx"], b["t_idx"])
