"""data=add: operand ranges, a held-out split disjoint from training, the final-number reward, and held-out greedy
accuracy (batched with left padding, scored by the same checker as the reward) in summary.json."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.algos.grpo.heldout import heldout_accuracy, heldout_checker
from posttrain.config.validate import ConfigError
from posttrain.data.grpo import build_grpo_dataset
from posttrain.data.rlvr.add import generate_addition
from posttrain.errors import DataError
from posttrain.models import load
from posttrain.models.generation import generate
from posttrain.models.tokenizer import build_byte_tokenizer
from posttrain.rewards.math import math_reward


def _problems(ds):
    return {row["prompt"][0]["content"] for row in ds}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_heldout_split_is_fixed_and_disjoint_from_training(seed):
    test = generate_addition(300, seed=seed, split="test", heldout_size=300)
    train = generate_addition(5000, seed=seed, split="train", heldout_size=300)
    assert len(_problems(test)) == 300 and not _problems(test) & _problems(train)
    assert test["prompt"] == generate_addition(300, seed=seed + 1, split="test", heldout_size=300)["prompt"]
    assert train["prompt"] != generate_addition(5000, seed=seed + 1, split="train", heldout_size=300)["prompt"]


def test_operand_ranges_operations_and_answers():
    ds = generate_addition(400, min_value=10, max_value=99, ops=["+", "-"], nonnegative=True)
    ops = set()
    for row in ds:
        text = row["prompt"][0]["content"]
        assert text.startswith("What is ") and text.endswith("? Answer with just the number.")
        a, op, b = text[len("What is ") :].split("?")[0].split()
        a, b = int(a), int(b)
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert int(row["answer"]) == (a + b if op == "+" else a - b) and int(row["answer"]) >= 0
        ops.add(op)
    assert ops == {"+", "-"}
    one_digit = generate_addition(50, min_value=0, max_value=9, ops=["+"], heldout_size=20)
    assert all(int(r["answer"]) <= 18 for r in one_digit)
    negatives = generate_addition(200, ops=["-"], nonnegative=False)
    assert any(int(r["answer"]) < 0 for r in negatives)


def test_train_op_share_sets_the_training_mix_and_leaves_the_heldout_pool(compose):
    def subtractions(ds):
        return sum(" - " in row["prompt"][0]["content"] for row in ds)

    natural = generate_addition(3000, seed=0)
    assert 950 <= subtractions(natural) <= 1050  # 4,095 of 12,195 problems: a third
    half = generate_addition(3000, seed=0, train_op_share=[0.5, 0.5])
    assert subtractions(half) == 1500 and len(_problems(half)) == 3000  # without replacement within each op
    assert subtractions(generate_addition(3001, seed=0, train_op_share=[0.33, 0.67])) == 2011
    test = generate_addition(200, split="test")
    assert generate_addition(200, split="test", train_op_share=[0.5, 0.5])["prompt"] == test["prompt"]
    assert not _problems(half) & _problems(generate_addition(500, split="test"))
    with pytest.raises(ValueError, match="one share >= 0 per op"):
        generate_addition(10, train_op_share=[0.6, 0.6])
    cfg = compose("data=add", "++data.params.train_op_share=[1.0]")
    with pytest.raises(DataError, match=r"train_op_share \[1.0\]"):
        build_grpo_dataset(cfg.data, build_byte_tokenizer("llama", "llama3.jinja"), 256)


def test_too_small_a_space_is_a_data_error(compose):
    cfg = compose("data=add", "data.params.max_value=12", "data.params.min_value=10")  # 3*3 + 6 problems
    with pytest.raises(DataError, match="heldout_size=500 leaves no training problems"):
        build_grpo_dataset(cfg.data, build_byte_tokenizer("llama", "llama3.jinja"), 256)


def test_final_number_reward_rejects_an_echoed_question():
    answers = {"answer": ["68"] * 7}
    completions = ["23 + 45 = 68", "68", "The answer is 68.", "23 + 45", "68 is it: 23+45=68", "23 + 45 = 67", ""]
    assert math_reward(None, completions, last_number=True, **answers) == [1, 1, 1, 0, 1, 0, 0]
    # math-verify's last expression evaluates the echoed question: why data=add sets last_number
    assert math_reward(None, ["23 + 45"], answer=["68"]) == [1.0]
    assert math_reward(
        None, ["12 - 17 = -5", "-5", "5", "1,068"], last_number=True, answer=["-5", "-5", "-5", "1068"]
    ) == [1, 1, 0, 1]


def test_heldout_checker_is_the_configured_math_reward(compose):
    check = heldout_checker(compose("data=add").algo)
    assert check(None, ["23 + 45"], answer=["68"]) == [0.0]  # with data=add's last_number option
    with pytest.raises(ConfigError, match="needs a `math` reward"):
        heldout_checker(compose("data=add", "algo.rewards=[{name: numeric_answer}]").algo)


def test_greedy_batches_with_left_padding_match_one_by_one(compose):
    torch.manual_seed(0)
    # a wide init so that greedy text depends on the prompt (the default tiny model answers every prompt alike)
    model, tok = load(compose("model=tiny_llama", "model.arch.initializer_range=0.5"), with_lora=False)
    with torch.no_grad():  # special tokens (EOS among them) get logit 0, below the best byte: text to compare
        model.lm_head.weight[256:] = 0
    tok.padding_side = "right"  # restored afterwards; batches are left-padded regardless
    prompts = [[{"role": "user", "content": c}] for c in ("a", "zzzzzzzzz", "0123456789 hello", "Q?")]
    batched = generate(model, tok, prompts, max_new_tokens=6, batch_size=4)[0]
    single = [generate(model, tok, [p], max_new_tokens=6, batch_size=1)[0][0] for p in prompts]
    assert batched == single and len(set(batched)) == 4 and tok.padding_side == "right"  # right padding: 3 differ


def test_heldout_accuracy_scores_the_test_split(compose, tmp_path, monkeypatch):
    cfg = compose("data=add", "algo.heldout=40")
    model, tok = load(compose("model=tiny_llama"), with_lora=False)
    test = generate_addition(40, split="test", heldout_size=500)
    right = {p[0]["content"]: f"It is {a}." for p, a in zip(test["prompt"], test["answer"])}
    # an oracle for the first 30 problems, no number for the rest: 30/40 correct
    fake = [right[p[0]["content"]] if i < 30 else "no idea" for i, p in enumerate(test["prompt"])]
    monkeypatch.setattr("posttrain.algos.grpo.heldout.generate", lambda *a, **k: (fake, None))
    out = heldout_accuracy(cfg, model, tok, tmp_path, "before")
    assert out["acc"] == pytest.approx(0.75) and out["n"] == 40
    rows = [json.loads(ln) for ln in (tmp_path / "heldout_before.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in rows] == [1.0] * 30 + [0.0] * 10 and rows[0]["answer"] == test["answer"][0]


@pytest.mark.slow
def test_summary_has_heldout_accuracy_before_and_after(tmp_path):
    from tests.conftest import run_cli

    proc = run_cli(
        "data=add",
        "algo.heldout=8",
        "trainer.max_steps=1",
        "trainer.per_device_batch_size=4",
        "algo.trl.num_generations=4",
        "algo.trl.max_completion_length=4",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("heldout_acc_before", "heldout_acc_after"):
        assert 0.0 <= summary[key] <= 1.0 and last[key] == summary[key]
    assert summary["heldout_n"] == 8
    assert len((tmp_path / "heldout_after.jsonl").read_text().splitlines()) == 8
    # the held-out scoring after training is timed apart from training, and the total holds both
    assert summary["evaluation_s"] > 0 and summary["total_s"] >= summary["runtime_s"] + summary["evaluation_s"] - 0.05
    # mode=eval on the saved adapter scores the same held-out problems the same way (greedy is deterministic)
    proc = run_cli(
        "data=add", "algo.heldout=8", "mode=eval", "algo.trl.max_completion_length=4", f"hydra.run.dir={tmp_path}"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluated = json.loads(proc.stdout.strip().splitlines()[-1])
    assert evaluated["checkpoint"].endswith("checkpoint-1") and evaluated["heldout_acc"] == summary["heldout_acc_after"]
    after = (tmp_path / "heldout_after.jsonl").read_text().splitlines()
    assert (tmp_path / "heldout_eval.jsonl").read_text().splitlines() == after


def test_heldout_start_scores_a_later_range_of_the_test_split(compose, tmp_path, monkeypatch):
    """algo.heldout_start=200 algo.heldout=300: problems 200-499 (issue 62's untouched test split), none of 0-199."""
    cfg = compose("data=add", "algo.heldout=300", "algo.heldout_start=200")
    model, tok = load(compose("model=tiny_llama"), with_lora=False)
    pool = generate_addition(500, split="test", heldout_size=500)
    asked = []

    def fake_generate(model, tokenizer, prompts, **kwargs):
        asked.extend(p[0]["content"] for p in prompts)
        return ["no idea"] * len(prompts), None

    monkeypatch.setattr("posttrain.algos.grpo.heldout.generate", fake_generate)
    out = heldout_accuracy(cfg, model, tok, tmp_path, "after")
    assert out["n"] == 300 and out["acc"] == 0.0
    assert asked == [p[0]["content"] for p in pool["prompt"][200:]]
    rows = [json.loads(ln) for ln in (tmp_path / "heldout_after.jsonl").read_text().splitlines()]
    assert rows[0]["answer"] == pool["answer"][200]
    with pytest.raises(DataError, match="501 held-out problems asked, heldout_size=500"):
        heldout_accuracy(compose("data=add", "algo.heldout=300", "algo.heldout_start=201"), model, tok, None, "x")
