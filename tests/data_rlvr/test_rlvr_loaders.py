"""Loaders for openai/gsm8k, google/IFEval and allenai/RLVR-IFeval, on local files in hub schema."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, concatenate_datasets

from posttrain.data.rlvr import (
    generate_arithmetic,
    generate_ifeval,
    load_gsm8k,
    load_ifeval,
    load_rlvr,
    load_rlvr_ifeval,
)
from posttrain.data.rlvr.loaders import parse_gsm8k_answer, rlvr_ground_truth_to_ifeval
from posttrain.rewards.ifeval import ifeval_loose, ifeval_strict
from posttrain.rewards.math import math_reward

GSM8K = [
    {
        "question": "Natalia sold clips to 48 friends in April, and half as many in May. How many in total?",
        "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nAltogether 48+24 = <<48+24=72>>72.\n#### 72",
    },
    {"question": "A shop sells 1,000 pens a day for 2 days. How many pens?", "answer": "1000*2=2000\n#### 2,000"},
    {"question": "What is 7 - 9?", "answer": "7 - 9 = -2\n#### -2"},
]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_parse_gsm8k_answer():
    assert parse_gsm8k_answer("work\n#### 1,234") == "1234"
    assert parse_gsm8k_answer("#### -3.5") == "-3.5"
    with pytest.raises(ValueError, match="####"):
        parse_gsm8k_answer("no final answer")


def test_load_gsm8k_jsonl_and_parquet(tmp_path):
    ds = load_gsm8k(str(_write_jsonl(tmp_path / "gsm8k_train.jsonl", GSM8K)))
    assert ds.column_names == ["prompt", "answer"] and ds["answer"] == ["72", "2000", "-2"]
    assert ds[0]["prompt"] == [{"role": "user", "content": GSM8K[0]["question"]}]
    Dataset.from_list(GSM8K).to_parquet(str(tmp_path / "train.parquet"))
    pq = load_gsm8k(str(tmp_path / "train.parquet"), chat=False)
    assert pq["answer"] == ["72", "2000", "-2"] and pq[1]["prompt"] == GSM8K[1]["question"]
    # same schema as the generator: the two concatenate, and the math reward scores both
    both = concatenate_datasets([ds, generate_arithmetic(2, seed=0)])
    assert math_reward(both["prompt"], ["\\boxed{72}", "2000", "-2", "0", "0"], answer=both["answer"])[:3] == [1.0] * 3


def test_hub_name_goes_to_load_dataset(monkeypatch):
    import posttrain.data.rlvr.loaders as loaders

    calls = []

    def fake_load_dataset(name, config=None, split=None, **kw):
        calls.append((name, config, split))
        return Dataset.from_list(GSM8K)

    monkeypatch.setattr(loaders, "load_dataset", fake_load_dataset)
    ds = load_gsm8k("openai/gsm8k", split="test")
    assert calls == [("openai/gsm8k", "main", "test")] and ds["answer"][0] == "72"
    with pytest.raises(FileNotFoundError):
        load_gsm8k("./missing/gsm8k.jsonl")


IFEVAL_ROWS = [
    {
        "key": 1000,
        "prompt": "Write a poem about rain. Do not use any commas.",
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"num_words": 5, "relation": "at least"}],
    },
    {
        "key": 1001,
        "prompt": "Describe Paris. Wrap your entire response with double quotation marks.",
        "instruction_id_list": ["startend:quotation"],
        "kwargs": [{"num_words": None}],
    },
]


def test_load_ifeval_local(tmp_path):
    ds = load_ifeval(str(_write_jsonl(tmp_path / "ifeval.jsonl", IFEVAL_ROWS)))
    assert ds["key"] == [1000, 1001] and ds[0]["instruction_id_list"] == IFEVAL_ROWS[0]["instruction_id_list"]
    assert ds[0]["kwargs"][1]["num_words"] == 5 and ds[0]["kwargs"][0]["num_words"] is None
    responses = ["rain falls soft and slow all night", 'Sure:\n"Paris is lovely."']
    cols = {"instruction_id_list": ds["instruction_id_list"], "kwargs": ds["kwargs"]}
    assert ifeval_strict(ds["prompt"], responses, **cols) == [1.0, 0.0]
    assert ifeval_loose(ds["prompt"], responses, **cols) == [1.0, 1.0]
    # hub parquet export has the full struct with nulls; it loads the same and matches the generator schema
    Dataset.from_list(IFEVAL_ROWS).to_parquet(str(tmp_path / "ifeval.parquet"))
    pq = load_ifeval(str(tmp_path / "ifeval.parquet"))
    assert pq.to_list() == ds.to_list()
    assert len(concatenate_datasets([pq, generate_ifeval(3)])) == 5


def _gt(**kw):
    base = {
        k: None
        for k in (
            "N",
            "quantifier",
            "word",
            "letter",
            "keyword_list",
            "forbidden_words",
            "language",
            "first_word",
            "i",
            "postscript_marker",
            "options",
            "section_splitter",
            "end_phrase",
            "original_prompt",
        )
    }
    return json.dumps({**base, **kw})


RLVR_ROWS = [
    {
        "messages": [{"role": "user", "content": "Write about cats. Use the word cat exactly 2 times."}],
        "ground_truth": _gt(func_name="verify_keyword_frequency", word="cat", N=2),
        "dataset": "ifeval",
        "constraint_type": "Keyword Frequency",
        "constraint": "...",
    },
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Answer in at most 3 words."},
        ],
        "ground_truth": _gt(func_name="validate_word_constraint", N=3, quantifier="at most"),
        "dataset": "ifeval",
        "constraint_type": "Number Words",
        "constraint": "...",
    },
    {
        "messages": [{"role": "user", "content": "Pick one: (A) or (B)."}],
        "ground_truth": _gt(func_name="validate_choice", options=["(A)", "(B)"]),
        "dataset": "ifeval",
        "constraint_type": "Choose",
        "constraint": "...",
    },
    {
        "messages": [{"role": "user", "content": "Sections please."}],
        "ground_truth": _gt(func_name="validate_sections", N=2, section_splitter="PART"),
        "dataset": "ifeval",
        "constraint_type": "Multiple Sections",
        "constraint": "...",
    },
]


def test_rlvr_ground_truth_mapping():
    assert rlvr_ground_truth_to_ifeval(RLVR_ROWS[0]["ground_truth"]) == (
        "keywords:frequency",
        {"keyword": "cat", "frequency": 2, "relation": "exactly"},
    )
    assert rlvr_ground_truth_to_ifeval({"func_name": "validate_lowercase", "N": None}) == (
        "change_case:english_lowercase",
        {},
    )
    assert rlvr_ground_truth_to_ifeval("{'func_name': 'verify_bullet_points', 'N': 3}") == (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 3},
    )
    with pytest.raises(ValueError, match="unknown RLVR"):
        rlvr_ground_truth_to_ifeval({"func_name": "nope"})


def test_load_rlvr_ifeval_local(tmp_path):
    path = _write_jsonl(tmp_path / "rlvr_ifeval.jsonl", RLVR_ROWS)
    ds = load_rlvr_ifeval(str(path), chat=False)
    assert ds["prompt"][1] == "Answer in at most 3 words."
    assert [i[0] for i in ds["instruction_id_list"]] == [
        "keywords:frequency",
        "length_constraints:number_words",
        "detectable_format:constrained_response",
        "detectable_format:multiple_sections",
    ]
    responses = ["A cat and a cat.", "Yes it is", "I pick (B).", "PART 1 intro PART 2 end"]
    wrong = ["A cat, a cat, a cat.", "No, it is not.", "Neither.", "PART 1 only"]
    cols = {"instruction_id_list": ds["instruction_id_list"], "kwargs": ds["kwargs"]}
    assert ifeval_strict(ds["prompt"], responses, **cols) == [1.0] * 4
    assert ifeval_strict(ds["prompt"], wrong, **cols) == [0.0] * 4
    # load_rlvr dispatches on the file name
    assert load_rlvr(str(path)).to_list() == load_rlvr_ifeval(str(path)).to_list()
    assert load_rlvr(str(_write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)))["answer"][0] == "72"
    with pytest.raises(ValueError, match="which RLVR set"):
        load_rlvr(str(_write_jsonl(tmp_path / "other.jsonl", GSM8K)))


def test_missing_columns_fail_loud(tmp_path):
    with pytest.raises(ValueError, match="missing columns"):
        load_gsm8k(str(_write_jsonl(tmp_path / "bad.jsonl", [{"q": "x"}])))
