"""Evaluation scores: whole-word answer matching, per-example records and the files a run leaves for CIs."""

from __future__ import annotations

import json

import pytest

from posttrain.algos.contrastive.evaluate import answer_in_reply, answer_match, records, score
from posttrain.data.contrastive import generate_triplets
from tests.contrastive.helpers import TINY


@pytest.mark.parametrize(
    "reply, answer, word, exact",
    [
        ("The email was sent by Ana.", "ana", True, False),
        ("ana", "ana", True, True),
        ('The title is "sun".', "sun", True, False),
        ("It is a banana.", "ana", False, False),  # inside another word: no credit
        ("Sunday", "sun", False, False),
        ("def add(x)", "add", True, False),
        ("", "ana", False, False),
    ],
)
def test_answer_in_reply_is_a_whole_word_match(reply, answer, word, exact):
    assert answer_in_reply(reply, answer) is word
    assert answer_match(reply, answer) is exact


def test_records_and_score_agree():
    rows = generate_triplets(6, seed=0, split="all", witness_split=True)
    benign = [r["answer"] if i % 2 else f"The answer is {r['answer'].upper()}." for i, r in enumerate(rows)]
    injected = [r["witness"].lower() if i < 3 else "no" for i, r in enumerate(rows)]
    recs = records(rows, benign, injected)
    assert [x["attack_success"] for x in recs] == [True, True, True, False, False, False]
    assert [x["benign_exact"] for x in recs] == [False, True, False, True, False, True]
    assert all(x["benign_word"] for x in recs) and not any(x["injected_word"] for x in recs)
    s = score(rows, benign, injected)
    assert s["utility_benign"] == 0.5 and s["utility_benign_word"] == 1.0 and s["utility_injected_word"] == 0.0
    held = [x["attack_success"] for x in recs if x["heldout"]]
    assert s["asr_heldout"] == round(sum(held) / len(held), 4)
    assert s["n_heldout_witness"] == s["n_heldout"] == len(held)


def test_runs_write_per_example_records(compose, tmp_path):
    from posttrain.run import run

    over = [*TINY, "data.num_eval=5", "algo.max_new_tokens=3", "trainer.max_steps=1"]
    run(compose(*over, run_dir=tmp_path / "train"))
    summary = json.loads((tmp_path / "train" / "summary.json").read_text())
    for tag in ("before", "after"):
        recs = [json.loads(ln) for ln in (tmp_path / "train" / f"eval_{tag}.jsonl").read_text().splitlines()]
        assert len(recs) == 5
        held = [x["attack_success"] for x in recs if x["heldout"]]
        assert summary[f"asr_heldout_{tag}"] == (round(sum(held) / len(held), 4) if held else None)
        assert summary[f"utility_benign_word_{tag}"] == round(sum(x["benign_word"] for x in recs) / 5, 4)
    run(compose(*over, "mode=eval", "eval.checkpoint=init", run_dir=tmp_path / "train"))
    init = [json.loads(ln) for ln in (tmp_path / "train" / "eval_init.jsonl").read_text().splitlines()]
    before = [json.loads(ln) for ln in (tmp_path / "train" / "eval_before.jsonl").read_text().splitlines()]
    assert init == before  # the start weights, scored by mode=eval, reply exactly as 'before' in training
