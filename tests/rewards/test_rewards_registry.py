"""build() from config specs, weighted sums, and use through TRL's own reward plumbing."""

from __future__ import annotations

import types

import pytest
import torch

from posttrain import rewards
from posttrain.rewards import REWARDS, build, weighted_sum

ROWS = {
    "answer": ["7", "7"],
    "instruction_id_list": [["punctuation:no_comma"], ["punctuation:no_comma"]],
    "kwargs": [[{}], [{}]],
}


def test_registry_names():
    assert set(REWARDS) == {
        "ifeval_strict",
        "ifeval_loose",
        "math",
        "digit_match",
        "harmony_format",
        "think_format",
        "length_to_cap",
        "numeric_answer",
    }


def test_build_weights_names_and_kwargs():
    specs = [
        {"name": "math", "weight": 1.0},
        {"name": "length_to_cap", "weight": 0.25, "kwargs": {"cap": 4, "unit": "chars"}},
        {"name": "ifeval_strict", "weight": 0.5, "alias": "ifeval"},
    ]
    funcs, weights = build(specs)
    assert [f.__name__ for f in funcs] == ["math", "length_to_cap", "ifeval"]
    assert weights == [1.0, 0.25, 0.5]
    comps = ["it is 7", "a, 8"]
    scores = [f(prompts=["q", "q"], completions=comps, completion_ids=[[1], [1]], **ROWS) for f in funcs]
    assert scores == [[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]]
    total = weighted_sum(funcs, weights)(["q", "q"], comps, completion_ids=[[1], [1]], **ROWS)
    assert total == pytest.approx([1.75, 0.25])


def test_built_rewards_pickle_and_trl_name():
    import pickle

    from trl.trainer.utils import get_callable_name

    funcs, _ = build([{"name": "length_to_cap", "kwargs": {"cap": 2, "unit": "chars"}, "alias": "len2"}])
    clone = pickle.loads(pickle.dumps(funcs[0]))
    assert get_callable_name(clone) == "len2"
    assert clone(["p"], ["a"]) == [0.5]


def test_build_accepts_omegaconf():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create([{"name": "think_format", "weight": 2, "kwargs": {"require_open_tag": False}}])
    funcs, weights = build(cfg)
    assert weights == [2.0] and funcs[0](["p"], ["r</think>a"]) == [1.0]


@pytest.mark.parametrize(
    "specs,err,match",
    [
        ([{"name": "nope"}], KeyError, "unknown reward"),
        ([{"name": "math", "kwargs": {"cap": 3}}], TypeError, "unknown kwargs"),
        ([{"name": "math", "wieght": 1}], ValueError, "needs 'name'"),
        ([{"name": "math"}, {"name": "math"}], ValueError, "used twice"),
        ([], ValueError, "no reward specs"),
    ],
)
def test_build_fails_fast(specs, err, match):
    with pytest.raises(err, match=match):
        build(specs)


def test_register_custom_reward():
    @rewards.register("_test_const")
    def const(prompts, completions, *, value: float = 1.0, **columns):
        return [value] * len(completions)

    try:
        funcs, _ = build([{"name": "_test_const", "kwargs": {"value": 0.5}}])
        assert funcs[0](["p"], ["c"]) == [0.5]
        with pytest.raises(ValueError, match="already registered"):
            rewards.register("_test_const", lambda prompts, completions, **k: [])
    finally:
        REWARDS.pop("_test_const")


def test_rewards_through_trl_calculate_rewards():
    """GRPOTrainer._calculate_rewards calls our functions exactly as in training."""
    from accelerate import Accelerator
    from transformers import TrainerState
    from trl import GRPOTrainer

    funcs, weights = build(
        [{"name": "math"}, {"name": "ifeval_strict"}, {"name": "length_to_cap", "kwargs": {"cap": 4}}]
    )
    fake = types.SimpleNamespace(
        accelerator=Accelerator(cpu=True),
        reward_funcs=funcs,
        reward_processing_classes=[None] * len(funcs),
        reward_func_names=[f.__name__ for f in funcs],
        state=TrainerState(),
        args=types.SimpleNamespace(report_to=[]),
        environments=None,
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None,
    )
    inputs = [{"prompt": [{"role": "user", "content": "q"}], **{k: v[i] for k, v in ROWS.items()}} for i in range(2)]
    prompts = [x["prompt"] for x in inputs]
    completions = [[{"role": "assistant", "content": "it is 7"}], [{"role": "assistant", "content": "a, 8"}]]
    out = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1, 2], [1, 2, 3, 4, 5]])
    assert torch.equal(out, torch.tensor([[1.0, 1.0, 0.5], [0.0, 0.0, 1.0]]))
