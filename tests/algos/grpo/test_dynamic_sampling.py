"""DAPO dynamic sampling: groups of equal rewards are replaced by fresh ones until the batch is full (or the cap on
extra rounds is reached, then dropped groups fill it), merged batches keep TRL's padding, and it is logged."""

from __future__ import annotations

import random

import torch
from trl import GRPOTrainer

from posttrain.algos.grpo.dynamic_sampling import informative_groups, merge_groups
from tests.algos.grpo.helpers import make_trainer


def _batch(advantages: list[float], prompt_width: int, completion_width: int, tag: int) -> dict:
    n = len(advantages)
    return {
        "prompt_ids": torch.full((n, prompt_width), tag),
        "prompt_mask": torch.ones(n, prompt_width, dtype=torch.long),
        "completion_ids": torch.full((n, completion_width), tag),
        "completion_mask": torch.ones(n, completion_width, dtype=torch.long),
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": torch.tensor(float(n * completion_width)),
    }


def test_informative_groups_are_those_with_any_nonzero_advantage():
    adv = torch.tensor([0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.5])
    assert informative_groups(adv, 2).tolist() == [False, True, False, True]


def test_merge_takes_informative_groups_first_then_fills_and_repads():
    a = _batch([0, 0, 1, -1], prompt_width=3, completion_width=2, tag=1)  # groups: dropped, kept
    b = _batch([0, 0, 0.5, -0.5], prompt_width=5, completion_width=4, tag=2)  # groups: dropped, kept
    keeps = [informative_groups(a["advantages"], 2), informative_groups(b["advantages"], 2)]
    merged, informative = merge_groups([a, b], keeps, n_groups=3, k=2, pad_token_id=0)
    assert informative == 2
    assert merged["prompt_ids"].shape == (6, 5) and merged["completion_ids"].shape == (6, 4)
    tags = merged["completion_ids"][:, 0].tolist()
    assert sorted(tags) == [1, 1, 1, 1, 2, 2]  # a's kept group, b's kept group, then a's dropped one to fill
    rows_a = merged["prompt_ids"][:, -1] == 1
    assert (merged["prompt_ids"][rows_a, :2] == 0).all() and (merged["prompt_mask"][rows_a, :2] == 0).all()  # left
    assert (merged["completion_ids"][rows_a, 2:] == 0).all() and (merged["completion_mask"][rows_a, 2:] == 0).all()
    assert merged["advantages"].abs().sum() == 3.0
    assert merged["num_items_in_batch"] == 4 * 2 + 2 * 4


def _prompt_gated_reward(prompts, completions, **kwargs):
    """Zero variance for prompts about 'the sea', a different reward per completion for the others."""
    gen = random.Random(str(completions))
    return [0.0 if "sea" in str(p) else gen.random() for p in prompts]


def test_trainer_refills_zero_std_groups_and_logs_it(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, "algo.trl.max_completion_length=4", reward=_prompt_gated_reward)
    trainer.dynamic_sampling_rounds = 6
    rounds: list[list[bool]] = []  # per generation round: which of its groups are informative
    original = GRPOTrainer._generate_and_score_completions

    def recording(self, inputs):
        out = original(self, inputs)
        rounds.append(informative_groups(out["advantages"], self.num_generations).tolist())
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recording)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    n_groups = len(rounds[0])
    groups = informative_groups(batch["advantages"], trainer.num_generations)
    available = sum(sum(r) for r in rounds)
    assert len(groups) == n_groups and int(groups.sum()) == min(available, n_groups)
    if all(rounds[0]):
        assert len(rounds) == 1
    else:  # refilled: more rounds until full or capped
        assert len(rounds) >= 2 and (available >= n_groups or len(rounds) == 1 + trainer.dynamic_sampling_rounds)
    metrics = trainer._metrics["train"]
    assert metrics["dynamic_sampling/zero_std_frac"][-1] == 1.0 - sum(rounds[0]) / n_groups
    assert metrics["dynamic_sampling/extra_generations"][-1] == (len(rounds) - 1) * n_groups * trainer.num_generations
    # every prompt's group is whole: each kept group's rows share one prompt
    prompts = batch["prompt_ids"].reshape(n_groups, trainer.num_generations, -1)
    assert all((g == g[0]).all() for g in prompts)


def test_refill_batches_sample_refill_groups_prompts_and_keep_the_step_size(tmp_path, monkeypatch):
    """`algo.dynamic_sampling.refill_groups`: each extra generation batch samples that many prompts (DAPO's
    gen_prompt_bsz); the step still trains on its own group count, informative groups first."""
    trainer = make_trainer(tmp_path, "algo.trl.max_completion_length=4", reward=_prompt_gated_reward)
    trainer.dynamic_sampling_rounds, trainer.dynamic_sampling_refill_groups = 3, 5
    sizes: list[int] = []
    original = GRPOTrainer._generate_and_score_completions

    def recording(self, inputs):
        sizes.append(len(inputs))
        out = original(self, inputs)
        # every group of the first batch is dropped: the step must be refilled from the larger batches
        return {**out, "advantages": torch.zeros_like(out["advantages"])} if len(sizes) == 1 else out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recording)
    trainer.model.train()
    k = trainer.num_generations
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    n_groups = sizes[0] // k
    assert sizes[1:] and all(size == 5 * k for size in sizes[1:]) and len(sizes) <= 4
    assert batch["advantages"].numel() == n_groups * k
    extra = trainer._metrics["train"]["dynamic_sampling/extra_generations"][-1]
    assert extra == (len(sizes) - 1) * 5 * k
