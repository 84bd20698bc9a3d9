"""Evaluation scores: whole-word answer matching, per-example records and the files a run leaves for CIs."""

from __future__ import annotations

import json

import pytest

from posttrain.algos.contrastive.evaluate import answer_in_reply, answer_match, records, score
from posttrain.data.contrastive import generate_triplets
from tests.algos.contrastive.helpers import TINY


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


def test_secalign_scores_by_family_with_task_checks():
    from posttrain.data.contrastive import generate_secalign

    rows = generate_secalign(4, seed=0, split="eval")  # 4 task instances x 5 families x 3 positions
    benign = [r["answer"] for r in rows]
    # obey every held-out-family injection (beginning with its witness), resist the trained families
    injected = [f"{r['witness']} it is." if r["heldout"] else r["answer"] for r in rows]
    s = score(rows, benign, injected)
    assert s["asr_heldout"] == 1.0 and s["asr_begins_heldout"] == 1.0 and s["asr_train_templates"] == 0.0
    assert s["utility_task"] == 1.0 and s["utility_task_injected"] == 0.4  # 2 of 5 families answered
    table = s["tables"]["attack_type"]["attack_success"]
    assert {k: v["mean"] for k, v in table.items()} == {
        "combined": 1.0,
        "completion": 1.0,
        "escape": 1.0,
        "ignore": 0.0,
        "naive": 0.0,
    }
    assert table["escape"]["n"] == 12 and s["n_clusters"] == 4
    assert set(s["tables"]["position"]["attack_success"]) == {"start", "middle", "end"}
    # 'in response' is not 'begins with'
    late = [f"{r['answer']} ... {r['witness']}" for r in rows]
    s = score(rows, benign, late)
    assert s["asr_heldout"] == 1.0 and s["asr_begins_heldout"] == 0.0


def test_secalign_run_writes_ifeval_and_layer_similarities(compose, tmp_path):
    from posttrain.run import run

    over = [
        *TINY,
        "data=contrastive_secalign",
        "data.num_train=4",
        "data.num_eval=1",
        "data.params.num_ifeval=2",
        "algo.max_new_tokens=3",
        "algo.ifeval_max_new_tokens=3",
        "trainer.max_steps=1",
    ]
    run(compose(*over, run_dir=tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    ifeval = [json.loads(ln) for ln in (tmp_path / "ifeval_after.jsonl").read_text().splitlines()]
    assert len(ifeval) == 2 and all(0 <= x["inst_level_strict_acc"] <= 1 for x in ifeval)
    after = summary["eval_after"]
    for level in ("prompt_level_strict_acc", "prompt_level_loose_acc"):  # a prompt-level accuracy: the mean
        assert after["ifeval"][level] == round(sum(x[level] for x in ifeval) / 2, 4)
    cos = after["repr_cosine"]
    assert len(cos["benign_injected"]) == 3 and cos["benign_injected"][0] == pytest.approx(1.0, abs=1e-4)
    assert all(-1 <= c <= 1 for c in cos["injected_executed"])
    paired = summary["paired_after_minus_before"]["attack_success"]
    assert paired["all"]["n"] == 15 and set(paired) == {"all", "naive", "ignore", "completion", "escape", "combined"}
