"""Reward histograms (issue 12 item 8): bins span the weighted total's range, train and eval are kept apart, and a
multi-process run records every rank's rewards with their own rows."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

from posttrain.algos.grpo.build import grpo_args
from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer
from posttrain.config.compose import load_config
from posttrain.models import load


def _declared(value: float, name: str):
    def reward(prompts, completions, **kwargs):
        return [value] * len(completions)

    reward.__name__ = name
    reward.value_range = (0.0, 1.0)
    return reward


class _Logs(TrainerCallback):
    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def _trainer(tmp_path, rewards, weights, eval_rows: int = 0) -> tuple[PosttrainGRPOTrainer, _Logs]:
    cfg = load_config(
        [
            "trainer.max_steps=1",
            "trainer.per_device_batch_size=8",
            "algo.trl.num_generations=4",
            "trainer.progress_bar=false",
            "algo.trl.max_completion_length=4",
        ]
    )
    torch.manual_seed(0)
    model, tok = load(cfg)
    rows = [
        {"prompt": [{"role": "user", "content": f"say {i}"}], "instruction_id_list": [f"kind{i % 2}:x"]}
        for i in range(2)
    ]
    logs = _Logs()
    trainer = PosttrainGRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=grpo_args(cfg, tmp_path, weights),
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:eval_rows]) if eval_rows else None,
        processing_class=tok,
        callbacks=[logs],
    )
    return trainer, logs


def _hist(log: dict, prefix: str = "reward_hist/") -> dict[str, int]:
    return {k[len(prefix) :]: v for k, v in log.items() if k.startswith(prefix)}


def test_bins_span_the_weighted_sum_of_the_rewards_ranges(tmp_path):
    """1.0 * 1.0 + 2.0 * 0.5 = 2.0 on a [0, 3] total: the [1.8, 2.4) bin, not all piled into [0.8, 1]."""
    trainer, logs = _trainer(tmp_path, [_declared(1.0, "one"), _declared(0.5, "half")], [1.0, 2.0])
    trainer.train()
    (row,) = [log for log in logs.logs if "loss" in log]
    hist = _hist(row)
    edges = ["0-0.6", "0.6-1.2", "1.2-1.8", "1.8-2.4", "2.4-3"]
    assert hist == {f"{t}/{e}": (4 if e == "1.8-2.4" else 0) for t in ("kind0", "kind1") for e in edges}
    assert row["reward"] == pytest.approx(2.0)


def test_train_histogram_holds_train_rewards_only_and_eval_gets_its_own(tmp_path):
    trainer, logs = _trainer(tmp_path, [_declared(1.0, "one")], [1.0], eval_rows=2)
    trainer.evaluate()
    trainer.train()
    (eval_row,) = [log for log in logs.logs if "eval_loss" in log]
    (train_row,) = [log for log in logs.logs if "loss" in log]
    # 8 train completions (2 prompts x 4 per type); the 2 eval prompts x 4 completions are eval's alone
    assert _hist(train_row) == {"kind0/0.8-1": 4, "kind1/0.8-1": 4} | {
        f"kind{k}/{e}": 0 for k in (0, 1) for e in ("0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8")
    }
    assert _hist(eval_row, "eval_reward_hist/") == {"kind0/0.8-1": 4, "kind1/0.8-1": 4} | {
        f"kind{k}/{e}": 0 for k in (0, 1) for e in ("0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8")
    }


def test_every_registered_reward_declares_its_range_and_bound_rewards_carry_it():
    from omegaconf import OmegaConf

    from posttrain.algos.grpo.reward_hist import total_range
    from posttrain.algos.grpo.rewards import reward_functions
    from posttrain.rewards import RANGES, REWARDS

    assert set(RANGES) == set(REWARDS)
    specs = [{"name": "length_to_cap", "weight": 2.0}, {"name": "math", "weight": -0.5}]
    funcs, weights = reward_functions(
        OmegaConf.create({"data": {"name": "x"}, "algo": {"rewards": specs}})
    )  # what the trainer gets
    assert [f.value_range for f in funcs] == [(0.0, 1.0), (0.0, 1.0)]
    assert total_range(funcs, weights) == (-0.5, 2.0)


def test_unknown_range_falls_back_to_the_windows_observed_values():
    from posttrain.algos.grpo.reward_hist import RewardHistogram, bin_edges, total_range

    def plain(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    assert total_range([plain], [1.0]) is None
    h = RewardHistogram(value_range=None)
    h.add([["all"]] * 3, [-1.0, 4.0, 1.5])
    assert h.flush() == {
        "reward_hist/all/-1-0": 1,
        "reward_hist/all/0-1": 0,
        "reward_hist/all/1-2": 1,
        "reward_hist/all/2-3": 0,
        "reward_hist/all/3-4": 1,
    }
    assert bin_edges((0.0, 0.0)) == (0.0, 0.0)


# two processes against one (histograms, adaptive beta): tests/sweeps/test_sweeps_e2e.py
