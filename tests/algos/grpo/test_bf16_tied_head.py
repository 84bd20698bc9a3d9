"""bf16 GRPO with LoRA on a model whose LM head is tied to the input embedding (SmolLM2, Llama 3.2): TRL 1.16's
`cast_lm_head_to_fp32` reaches the embedding as `model.model.embed_tokens`, which a PEFT-wrapped model does not
have (AttributeError at trainer construction). The kernel backends that upcast the head themselves (fused, eager)
do not need TRL's cast, so posttrain leaves it off for them; on TRL's loss path (kernels=trl, the GPU profiles'
default) the trainer re-adds TRL's fused head with the fp32 cast itself (`policy_forward.fp32_fused_head`)."""

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
    "algo.trl.num_generations=2",
    "algo.trl.max_completion_length=4",
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


def _fp32_head_logps(lm, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """log p(next token) from the backbone's hidden states (bf16 autocast, as training runs it) through the head in
    fp32."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = lm.model(input_ids=ids).last_hidden_state
    logits = torch.nn.functional.linear(hidden.float(), lm.lm_head.weight.float()) / temperature
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]


def test_bf16_lora_tied_head_scores_in_fp32_on_trls_loss_path(tmp_path):
    cfg = load_config([*TIED_BF16, "kernels=trl"])
    trainer = build_trainer(cfg, tmp_path, [])
    assert trainer.args.cast_lm_head_to_fp32
    lm = trainer.model.get_base_model()
    assert lm.lm_head.weight is lm.model.embed_tokens.weight  # still tied
    ids = torch.randint(0, lm.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = trainer.model(input_ids=ids, labels=ids, fused_lm_head=True)
    assert out.log_probs.dtype == torch.float32
    expected = _fp32_head_logps(lm, ids, trainer.temperature)
    torch.testing.assert_close(out.log_probs, expected, atol=1e-5, rtol=1e-5)
    trainer.train()
    assert math.isfinite(trainer.state.log_history[0]["loss"])
