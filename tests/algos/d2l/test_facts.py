"""Generated documents with open answers (`data=d2l_facts`): answers are spans nobody can guess, one- and two-fact
questions, disjoint held-out names, long documents at a length in tokens with the same questions at every length,
SQuAD v1.1 export read back by the SQuAD loader, parameters refused at compose."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from posttrain.data.d2l import d2l_records, fact_documents, fact_qa, load_squad
from posttrain.data.d2l.facts import BRIDGES, FACTS, held_out_name, main, to_squad
from posttrain.data.d2l.haystack import FILLER

NAMES = ("person", "birthplace", "org", "org_city", "mentor", "mentor_city")  # composed name-valued fields
NAME_KINDS = {"birthplace", "founded", "org_city", "mentor", "mentor_city"}


@pytest.fixture(scope="module")
def tokenizer():
    from posttrain.models.tokenizer import build_byte_tokenizer  # the tiny models' tokenizer: a token per byte

    return build_byte_tokenizer("llama", "llama3.jinja")


def test_answers_are_spans_with_their_evidence_and_reply():
    docs = fact_documents(30, seed=1, held_out=True, single_hop=4, two_hop=2)
    assert docs == fact_documents(30, seed=1, held_out=True, single_hop=4, two_hop=2)
    for d in docs:
        assert [qa["hops"] for qa in d["qas"]] == [1, 1, 1, 1, 2, 2]
        assert len(d["probes"]) == len(d["sentences"]) == len(FACTS)
        for qa in d["qas"]:
            start = qa["answer_start"]
            assert d["document"][start : start + len(qa["answer"])] == qa["answer"]
            assert start + len(qa["answer"]) <= qa["evidence_end"] <= len(d["document"])
            assert qa["reply"] in d["sentences"] and qa["answer"] in qa["reply"]
            assert qa["question"] not in d["probes"]  # probes are paraphrases
    # a bridge never names its bridge entity: "Where is the company founded by X based?" does not name the company
    bridge = next(qa for d in docs for qa in d["qas"] if qa["kind"] == "org_city_of_founder")
    doc = next(d for d in docs if bridge in d["qas"])
    assert doc["facts"]["founded"] not in bridge["question"] and doc["entity"] in bridge["question"]


def test_open_answers_are_not_guessable():
    records = fact_qa(300, seed=0, held_out=True, single_hop=9, two_hop=0)
    by_kind: dict[str, list[str]] = {}
    for r in records:
        by_kind.setdefault(r["kind"], []).append(r["answer"])
    assert set(by_kind) == {f.kind for f in FACTS}
    for kind, answers in by_kind.items():
        top = Counter(answers).most_common(1)[0][1] / len(answers)
        assert top <= 0.02, (kind, Counter(answers).most_common(3))  # the best single guess: at most 2%
        if kind in NAME_KINDS:
            assert len(set(answers)) >= 0.99 * len(answers)


def test_held_out_names_never_occur_in_training():
    train = fact_documents(400, seed=0)
    held = fact_documents(100, seed=0, held_out=True)
    assert all(not held_out_name(d["entity"]) for d in train) and all(held_out_name(d["entity"]) for d in held)
    names = {d["facts"][k] for d in held for k in NAME_KINDS}
    train_text = " ".join(d["document"] for d in train)
    assert names and not [n for n in names if n in train_text]
    assert not {d["entity"] for d in held} & {d["entity"] for d in train}


@pytest.mark.parametrize("multiple", [2, 4, 8])
def test_long_documents_hit_their_length_with_the_same_questions(tokenizer, multiple):
    window = 128  # tiny tokenizer: a token per byte; 3 facts take about 130
    short = fact_qa(6, seed=0, held_out=True, num_facts=3, single_hop=2, two_hop=1)
    long = fact_qa(6, seed=0, held_out=True, num_facts=3, single_hop=2, two_hop=1,
                   eval_doc_tokens=multiple * window, tokenizer=tokenizer)  # fmt: skip
    keys = ("doc_id", "question", "answer", "kind", "hops")
    assert [{k: r[k] for k in keys} for r in long] == [{k: r[k] for k in keys} for r in short]
    longest_filler = max(len(tokenizer(" " + s, add_special_tokens=False)["input_ids"]) for s in FILLER)
    for r in long:
        n = len(tokenizer(r["document"], add_special_tokens=False)["input_ids"])
        assert multiple * window - longest_filler < n <= multiple * window
        assert r["document"][r["answer_start"] :].startswith(r["answer"])
        assert r["evidence_end"] <= len(r["document"])
    depths = [r["answer_start"] / len(r["document"]) for r in long]
    assert max(depths) - min(depths) > 0.3  # needles at varied depths
    with pytest.raises(ValueError, match="tokenizer"):
        fact_qa(2, held_out=True, eval_doc_tokens=128)


def test_train_skip_continues_the_stream_and_leaves_held_out_documents(tokenizer):
    """A continued run reads the documents after the first `train_skip`: the same ones a longer run would have read."""
    kw = {"num_facts": 3, "train_doc_tokens": 256, "tokenizer": tokenizer}
    whole = fact_documents(7, seed=0, **kw)
    assert fact_documents(3, seed=0, train_skip=4, **kw) == whole[4:]
    assert fact_documents(3, seed=0, held_out=True, train_skip=4) == fact_documents(3, seed=0, held_out=True)
    with pytest.raises(ValueError, match="train_skip=-1"):
        fact_documents(2, train_skip=-1)


def test_squad_export_reads_back_through_the_squad_loader(tmp_path):
    docs = fact_documents(5, seed=2, held_out=True)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(to_squad(docs)))
    back = load_squad(str(path))
    flat = fact_qa(5, seed=2, held_out=True)
    keys = ("doc_id", "document", "question", "answer", "answers", "answer_start")
    assert [{k: r[k] for k in keys} for r in back] == [{k: r[k] for k in keys} for r in flat]
    main(["--out", str(tmp_path / "cli.json"), "--docs", "5", "--seed", "2"])  # the CLI writes the same set
    assert load_squad(str(tmp_path / "cli.json")) == back
    squad = json.loads((tmp_path / "cli.json").read_text())
    assert squad["version"] == "1.1" and len(squad["data"]) == 5


def test_facts_through_the_data_config(compose, tokenizer):
    cfg = compose(
        "algo=d2l", "data=d2l_facts", "data.num_train=4", "data.num_eval=3", "algo.encoder.max_chunks=8",
        "+data.params.eval_doc_tokens=512", "+data.params.reply=sentence",
    )  # fmt: skip
    train, held = d2l_records(cfg.data, tokenizer)
    assert len(train) == 4 * 4 and len(held) == 3 * 4  # 3 single-hop + 1 two-hop questions per document
    assert all(r["reply"] != r["answer"] and r["answer"] in r["reply"] for r in train + held)
    assert all(len(r["document"]) > 400 for r in held) and all(len(r["document"]) < 400 for r in train)
    assert len(BRIDGES) == 5


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["+data.params.num_facts=10"], "data.params.num_facts=10"),
        (["+data.params.single_hop=0", "+data.params.two_hop=0"], "at least 1"),
        (["+data.params.reply=essay"], "data.params.reply"),
        (["+data.params.colour=red"], "data.params.colour"),
        (["+data.params.train_skip=-5"], "data.params.train_skip=-5"),
        (["+data.params.eval_doc_tokens=2048"], "exceeds what D2L reads"),  # 256 x 4 by default
        (["algo.context_window=1024"], "exceeds the model's 512 positions"),
        (["algo.eval_conditions=[d2l,telepathy]"], "telepathy"),
        (["algo.eval_conditions=[cd]"], "cd_steps=0"),
        (["algo.baselines.cd_probes=guesses"], "cd_probes"),
        (["algo.locality_coef=-1"], "locality_coef"),
        (["algo.locality_span=value"], "locality_span"),
    ],
)
def test_bad_facts_and_evaluation_settings_fail_at_compose(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(["algo=d2l", "data=d2l_facts", *overrides])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_featurize_all_in_workers_equals_one_process(tokenizer, monkeypatch):
    """Many records are featurized in worker processes (datasets.map): the same rows, in the same order."""
    import posttrain.data.d2l as d2l_data
    from posttrain.data.d2l import featurize, featurize_all

    records = fact_qa(6, seed=3, held_out=False, tokenizer=tokenizer, num_facts=3, single_hop=2, two_hop=1,
                      train_doc_tokens=400)  # fmt: skip
    monkeypatch.setattr(d2l_data, "PARALLEL_MIN_RECORDS", 2)
    rows = featurize_all(records, tokenizer, 256, 128, max_chunks=4, num_proc=2)
    assert rows == [featurize(r, tokenizer, 256, 128, max_chunks=4) for r in records]
    assert max(len(r["ctx_chunks"]) for r in rows) > 1  # the multi-chunk documents went through the workers


def test_featurize_all_in_workers_raises_the_records_data_error(tokenizer, monkeypatch):
    """A bad record fails a worker with the same one-line DataError as in this process."""
    import posttrain.data.d2l as d2l_data
    from posttrain.data.d2l import featurize_all
    from posttrain.errors import DataError

    records = fact_qa(4, seed=1, held_out=False, tokenizer=tokenizer, num_facts=3, single_hop=2, two_hop=1)
    records[5] = {**records[5], "document": ""}
    monkeypatch.setattr(d2l_data, "PARALLEL_MIN_RECORDS", 2)
    with pytest.raises(DataError, match=r"the document of .* is empty: nothing to internalize"):
        featurize_all(records, tokenizer, 256, 128, max_chunks=4, num_proc=2)
