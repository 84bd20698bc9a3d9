"""GRPO with each generation backend: TRL's transformers path decodes with a KV cache (one new token per forward),
and `algo.generation.backend=static` trains, sampling from a copy re-synced (and timed) after every optimizer step."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from posttrain.algos.grpo.build import build_trainer
from posttrain.config.compose import load_config
from posttrain.rollout.merged_copy import RolloutCopy
from tests.algos.grpo.helpers import first_batch, make_trainer

SMALL = [
    "trainer.progress_bar=false",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=2",
    "algo.trl.max_completion_length=6",
    "trainer.logging_steps=1",
]


def test_trl_generation_decodes_with_a_kv_cache(tmp_path):
    """The policy is loaded with use_cache=False for training; TRL's `generate` must not inherit it (that would
    recompute the whole sequence for every new token)."""
    trainer = make_trainer(tmp_path, "algo.trl.max_completion_length=5")
    policy = trainer.accelerator.unwrap_model(trainer.model)
    widths: list[int] = []
    hook = policy.get_base_model().register_forward_pre_hook(
        lambda m, args, kwargs: widths.append(kwargs["input_ids"].size(1)), with_kwargs=True
    )
    try:
        first_batch(trainer)
    finally:
        hook.remove()
    # generation: the prompt once, then one token per step for the other 4 of 5 (then TRL's scoring forward)
    assert widths[0] > 1 and widths[1:5] == [1, 1, 1, 1], widths


@pytest.mark.parametrize("model", ["tiny_gpt_oss", "tiny_llama"])
def test_static_backend_trains_with_a_synced_copy(tmp_path, model):
    cfg = load_config(
        [f"model={model}", "algo.generation.backend=static", "trainer.max_steps=2", *SMALL, f"+run_dir={tmp_path}"]
    )
    trainer = build_trainer(cfg, tmp_path, [])
    engine = trainer.rollout
    assert engine is not None and engine.name == "static" and isinstance(engine.rollout_copy, RolloutCopy)
    assert engine.static_cache_len == cfg.algo.max_prompt_length + cfg.algo.trl.max_completion_length
    calls = []
    generate = engine.model.generate
    engine.model.generate = lambda *a, **k: calls.append(k["past_key_values"]) or generate(*a, **k)
    logged: list[dict] = []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append(dict(logs or {}))

    trainer.add_callback(Record())
    trainer.train()
    assert len(calls) == 2 and calls[0] is calls[1]  # one static cache, reused by both rounds
    steps = [r for r in logged if "loss" in r]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in steps)
    assert "rollout/sync_seconds" not in steps[0] and steps[1]["rollout/sync_seconds"] > 0  # synced after step 1
    assert all(r["rollout/tokens_per_second"] > 0 for r in steps)
    policy = trainer.accelerator.unwrap_model(trainer.model)
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().max() > 0 for p in lora_b)  # trained
    assert trainer._rollout_step == 1  # the copy holds the weights after step 1, what round 2 sampled from
