"""bf16 GRPO with LoRA on a model whose LM head is tied to the input embedding (SmolLM2): TRL 1.16's
`cast_lm_head_to_fp32` reaches the embedding as `model.model.embed_tokens`, which a PEFT-wrapped model does not
have (AttributeError at trainer construction). The kernel backends that upcast the head themselves (fused, eager)
do not need TRL's cast, so posttrain leaves it off for them."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.grpo.build import build_trainer, grpo_args
from posttrain.config.compose import load_config

TIED_BF16 = [
    "model=tiny_llama",
    "model.arch.tie_word_embeddings=true",
    "hw.precision=bf16",
    "trainer.max_steps=1",
    "trainer.per_device_batch_size=4",
    "algo.num_generations=2",
    "algo.max_completion_length=4",
    "trainer.progress_bar=false",
]


@pytest.mark.parametrize("backend,cast", [("fused", False), ("eager", False), ("trl", True)])
def test_fp32_head_cast_only_where_the_loss_does_not_upcast(tmp_path, backend, cast):
    cfg = load_config([*TIED_BF16, f"kernels={backend}"])
    assert grpo_args(cfg, tmp_path).cast_lm_head_to_fp32 is cast


def test_bf16_lora_tied_head_trains_with_the_fused_kernel(tmp_path):
    cfg = load_config([*TIED_BF16, "kernels=fused"])
    trainer = build_trainer(cfg, tmp_path, [])
    lm = trainer.model.get_base_model()
    assert lm.lm_head.weight is lm.model.embed_tokens.weight and lm.lm_head.weight.dtype == torch.bfloat16
    trainer.train()
    loss = trainer.state.log_history[0]["loss"]
    assert math.isfinite(loss)
