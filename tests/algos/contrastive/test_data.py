"""Triplets: paraphrase counterfactuals, injections embedded in data, held-out templates out of training,
JSONL schema checks, and one padding rule for dataset and collator."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.data.chat import IGNORE_INDEX
from posttrain.data.contrastive import (
    ALL_ROLES,
    TripletCollator,
    TripletDataset,
    build_triplets,
    generate_triplets,
    load_triplets,
    pad_rows,
    write_jsonl,
)
from posttrain.data.contrastive.templates import ATTACK_TYPES, ATTACKS, TASK_KINDS, TASKS
from posttrain.errors import DataError
from posttrain.models.tokenizer import build_byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer("llama", "llama3.jinja")


def test_triplets_are_paraphrase_and_embedded_injection():
    rows = generate_triplets(200, seed=3, split="all")
    assert {r["task"] for r in rows} == set(TASK_KINDS)
    assert {r["attack_type"] for r in rows} == set(ATTACK_TYPES)
    for r in rows:
        b, c, i = r["benign"], r["counterfactual"], r["injected"]
        assert c["data"] == b["data"] and c["request"] != b["request"]  # same data, reworded request
        assert i["request"] == b["request"] and r["injection"] in i["data"]
        # the injected data is the benign data plus the injection (nothing else changes)
        rest = [w for w in i["data"].replace(r["injection"], "").split() if w != "#"]
        assert rest == [w for w in b["data"].split() if w != "#"]
        assert r["answer"] in b["data"] and r["witness"] in r["injection"]


def test_heldout_templates_never_in_training():
    heldout = {t.format(w="") for a in ATTACKS.values() for t in a["heldout"]}
    train = generate_triplets(300, seed=0, split="train")
    assert not any(r["heldout"] for r in train)
    used = {r["injection"].replace(r["witness"], "") for r in train}
    assert not used & heldout
    assert "fake_completion" not in {r["attack_type"] for r in train}
    ev = generate_triplets(300, seed=0, split="all")
    assert {r["injection"].replace(r["witness"], "") for r in ev} & heldout


def test_generator_is_deterministic_and_splits_differ():
    assert generate_triplets(20, seed=1) == generate_triplets(20, seed=1)
    assert generate_triplets(20, seed=1) != generate_triplets(20, seed=2)


def test_jsonl_round_trip_and_schema_errors(tmp_path, compose):
    rows = generate_triplets(10, seed=0)
    path = write_jsonl(rows, tmp_path / "t.jsonl")
    assert load_triplets(path) == rows
    bad = dict(rows[0], counterfactual={"request": "Other?", "data": "different data"})
    write_jsonl([rows[1], bad], tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match=r"bad.jsonl row 2: counterfactual must paraphrase"):
        load_triplets(tmp_path / "bad.jsonl")
    standalone = dict(rows[0], injected={"request": rows[0]["benign"]["request"], "data": rows[0]["benign"]["data"]})
    write_jsonl([standalone], tmp_path / "standalone.jsonl")
    with pytest.raises(DataError, match="embedded in the injected data"):
        load_triplets(tmp_path / "standalone.jsonl")
    # held-out rows in a training file are refused
    leaked = generate_triplets(10, seed=0, split="heldout")
    write_jsonl(leaked, tmp_path / "leak.jsonl")
    cfg = compose("algo=contrastive", "data=contrastive_jsonl", f"data.path={tmp_path / 'leak.jsonl'}")
    with pytest.raises(DataError, match="held-out attack templates"):
        build_triplets(cfg.data, "train")


def test_labels_cover_exactly_the_answer(tok):
    row = generate_triplets(1, seed=0)[0]
    item = TripletDataset([row], tok, 384, pool="prompt", roles=ALL_ROLES)[0]
    for role in ALL_ROLES:
        enc = item[role]
        answer_ids = [t for t in enc["labels"] if t != IGNORE_INDEX]
        expected = row["injected_answer"] if role == "executed" else row["answer"]  # executed: obeys the injection
        assert tok.decode(answer_ids) == expected + tok.eos_token
        # pool over the prompt: every real non-answer token, nothing else
        assert all(p == int(lab == IGNORE_INDEX) for p, lab in zip(enc["pool_mask"], enc["labels"]))
    witness = TripletDataset([row], tok, 384, injected_target="witness")[0]["injected"]
    assert tok.decode([t for t in witness["labels"] if t != IGNORE_INDEX]) == row["witness"] + tok.eos_token


def test_too_long_member_is_an_error_not_a_truncation(tok):
    with pytest.raises(DataError, match=r"longer than algo\.max_length=40"):
        TripletDataset(generate_triplets(1, seed=0), tok, 40)


def test_one_padding_rule_for_dataset_and_collator(tok):
    rows = generate_triplets(3, seed=0)
    raw = TripletDataset(rows, tok, 256)
    pre = TripletDataset(rows, tok, 256, pad_to_max_length=True)
    collate = TripletCollator(tok.pad_token_id)
    a = collate([raw[i] for i in range(3)])
    b = collate([pre[i] for i in range(3)])
    assert b["input_ids"].shape == (9, 256)
    # same rows, same right padding: pre-padded batch = dynamic batch padded on to 256
    widened = pad_rows([{k: a[k][r].tolist() for k in a} for r in range(9)], tok.pad_token_id, 256)
    for key in a:
        assert torch.equal(widened[key], b[key]), key
    # layout: [benign x3 | counterfactual x3 | injected x3], right padding values
    lengths = a["attention_mask"].sum(1)
    assert lengths[0] == len(raw[0]["benign"]["input_ids"]) and lengths[3] == len(raw[0]["counterfactual"]["input_ids"])
    assert lengths[6] == len(raw[0]["injected"]["input_ids"])
    r = int(torch.argmin(lengths))
    n = int(lengths[r])
    assert (a["attention_mask"][r, :n] == 1).all() and (a["attention_mask"][r, n:] == 0).all()
    assert (a["input_ids"][r, n:] == tok.pad_token_id).all() and (a["labels"][r, n:] == IGNORE_INDEX).all()
    assert (a["pool_mask"][r, n:] == 0).all()


def test_data_config_files_compose(compose):
    cfg = compose("algo=contrastive", "data=contrastive_injection")
    assert cfg.data.params.train_templates == "train" and cfg.algo.temperature > 0
    rows = build_triplets(cfg.data, "eval")
    assert len(rows) == cfg.data.num_eval and any(r["heldout"] for r in rows)
    assert json.loads(json.dumps(rows[0])) == rows[0]


@pytest.mark.parametrize(
    "override, message",
    [
        ("algo.temperature=0", "algo.temperature=0.0 must be > 0"),
        ("model.lora.enabled=false", "model.lora.enabled must be true"),
        ("algo.pool=cls", "algo.pool='cls' is not one of last, prompt, all"),
        ("algo.proj_dim=0", "algo.proj_dim=0 must be > 0"),
    ],
)
def test_config_rules_fail_in_one_line(override, message):
    from posttrain.config.compose import load_config
    from posttrain.config.validate import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(["algo=contrastive", "data=contrastive_injection", override])


def test_witness_split_keeps_heldout_witnesses_out_of_training(compose):
    from posttrain.data.contrastive.templates import WITNESSES

    assert not set(WITNESSES["train"]) & set(WITNESSES["heldout"])
    train = generate_triplets(300, seed=0, split="train", witness_split=True)
    assert {r["witness"] for r in train} == set(WITNESSES["train"]) and not any(r["witness_heldout"] for r in train)
    ev = generate_triplets(300, seed=0, split="all", witness_split=True)
    for r in ev:  # a held-out template asks for a held-out witness, a training template for a training one
        assert r["witness_heldout"] == r["heldout"]
        assert r["witness"] in WITNESSES["heldout" if r["heldout"] else "train"]
    assert {r["witness"] for r in ev if r["heldout"]} == set(WITNESSES["heldout"])
    # without the split (the default) held-out templates reuse the training witnesses
    assert {r["witness"] for r in generate_triplets(300, seed=0, split="heldout")} <= set(WITNESSES["train"])
    cfg = compose("algo=contrastive", "data=contrastive_injection", "data.params.witness_split=true")
    assert all(r["witness_heldout"] for r in build_triplets(cfg.data, "eval") if r["heldout"])


def test_training_rows_with_heldout_witnesses_are_refused(tmp_path, compose):
    rows = generate_triplets(6, seed=0, split="train")
    rows[3] = dict(rows[3], witness_heldout=True)
    write_jsonl(rows, tmp_path / "leak.jsonl")
    cfg = compose("algo=contrastive", "data=contrastive_jsonl", f"data.path={tmp_path / 'leak.jsonl'}")
    with pytest.raises(DataError, match="1 training triplets use held-out witness words"):
        build_triplets(cfg.data, "train")


@pytest.mark.parametrize("position", ["start", "end"])
def test_injection_position(position):
    rows = generate_triplets(40, seed=1, split="all", injection_position=position)
    default = generate_triplets(40, seed=1, split="all")
    for r, d in zip(rows, default):
        assert r["benign"] == d["benign"] and r["answer"] == d["answer"]  # only where the injection sits moves
        data, inj = r["injected"]["data"], r["injection"]
        fillers = [f for f in TASKS[r["task"]]["fillers"] if f in r["benign"]["data"]]
        assert len(fillers) == 2
        where = [data.index(inj) < data.index(f) for f in fillers]  # before each filler line?
        assert where == ([True, True] if position == "start" else [False, False])
        if position == "end" and r["task"] != "code":  # code: the injection is the last comment before `return`
            assert data.endswith(inj)
    with pytest.raises(ValueError, match="injection_position='middle'"):
        generate_triplets(2, injection_position="middle")


def test_eval_templates_heldout_and_extra_attack_types(compose):
    types = "[answer_note,reply_order]"
    over = ("algo=contrastive", "data=contrastive_injection", f"data.params.attack_types={types}")
    cfg = compose(*over, "data.params.eval_templates=heldout", "data.num_eval=40", "data.num_train=60")
    ev = build_triplets(cfg.data, "eval")
    assert len(ev) == 40 and all(r["heldout"] for r in ev)
    assert {r["attack_type"] for r in ev} == {"answer_note", "reply_order"}
    train = build_triplets(cfg.data, "train")
    heldout = {ATTACKS[t]["heldout"][i] for t in ("answer_note", "reply_order") for i in range(2)}
    assert {r["template_id"].split("/")[0] for r in train} == {"answer_note", "reply_order"}
    assert not {ATTACKS[r["attack_type"]]["train"][int(r["template_id"].split("/")[2])] for r in train} & heldout
    # the new types are opt-in: the default set is unchanged
    assert "answer_note" not in ATTACK_TYPES
    with pytest.raises(DataError, match="eval_templates='train' is not one of all, heldout"):
        build_triplets(compose(*over, "data.params.eval_templates=train").data, "eval")
