"""LoRA+ (`model.lora.loraplus_lr_ratio`, posttrain.lora_plus): the B matrices step at the ratio times trainer.lr,
the A matrices at trainer.lr, on the GRPO and contrastive trainers; D2L (no model.lora) refuses it."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.grpo.build import build_trainer
from posttrain.config.compose import load_config
from posttrain.errors import ConfigError

GRPO = [
    "model=tiny_llama",
    "trainer.max_steps=1",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=2",
    "algo.trl.max_completion_length=4",
    "trainer.progress_bar=false",
    "trainer.lr=1e-3",
    "trainer.weight_decay=0",
    "trainer.lr_scheduler=constant",
    "trainer.warmup_steps=0",
]


def _lora(model: torch.nn.Module, which: str) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if f"lora_{which}" in n}


@pytest.mark.parametrize("ratio", [None, 4.0])
def test_b_matrices_step_at_the_ratio_times_the_lr(tmp_path, ratio):
    overrides = GRPO if ratio is None else [*GRPO, f"model.lora.loraplus_lr_ratio={ratio}"]
    trainer = build_trainer(load_config(overrides), tmp_path, [])
    a0, b0 = _lora(trainer.model, "A"), _lora(trainer.model, "B")
    assert b0 and all(not b.any() for b in b0.values())  # B starts at zero: only B moves at the first step
    trainer.train()
    lrs = sorted({group["lr"] for group in trainer.optimizer.param_groups if group["params"]})
    assert lrs == ([1e-3] if ratio is None else [1e-3, 4e-3])
    moved_b = max((_lora(trainer.model, "B")[n] - b).abs().max().item() for n, b in b0.items())
    # Adam's first step moves a parameter by lr * g / (|g| + eps): the largest moves are the lr itself
    assert moved_b == pytest.approx(1e-3 * (ratio or 1.0), rel=1e-2)
    moved_a = max((_lora(trainer.model, "A")[n] - a).abs().max().item() for n, a in a0.items())
    assert moved_a == 0.0  # dL/dA = 0 while B = 0


def test_contrastive_trainer_takes_the_ratio(tmp_path):
    from posttrain.algos.contrastive.api import build_trainer as build_contrastive
    from tests.algos.contrastive.helpers import TINY

    cfg = load_config([*TINY, "trainer.max_steps=1", "model.lora.loraplus_lr_ratio=8"])
    trainer = build_contrastive(cfg, tmp_path)
    trainer.create_optimizer()
    by_lr: dict[float, list[str]] = {}
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    for group in trainer.optimizer.param_groups:
        by_lr.setdefault(group["lr"], []).extend(names[id(p)] for p in group["params"])
    b_lr = 8 * cfg.trainer.lr
    assert by_lr[b_lr] and all("lora_B" in n or n.endswith("bias") for n in by_lr[b_lr])
    assert any("lora_A" in n for n in by_lr[cfg.trainer.lr])


def test_d2l_refuses_the_ratio():
    with pytest.raises(ConfigError, match="loraplus_lr_ratio with algo=d2l"):
        load_config(["algo=d2l", "model.lora.loraplus_lr_ratio=4"])


def test_ratio_below_one_is_refused():
    with pytest.raises(Exception, match="loraplus_lr_ratio"):
        load_config([*GRPO, "model.lora.loraplus_lr_ratio=0.5"])
