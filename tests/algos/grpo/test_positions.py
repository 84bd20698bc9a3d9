"""Left-padded rollouts are re-scored at the positions they were sampled at (bf16, past the sliding window).

Generation derives position ids from the attention mask (`cumsum(mask) - 1`); a forward without position ids
numbers the left padding too, so every real token of a padded row sits at a shifted position. RoPE cancels the
shift in exact arithmetic, not in bf16: re-scored log-probs then drift from the sampling distribution (mean
|dlogp| ~0.1 on this model before the trainer passed position ids).
"""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.grpo.policy_forward import causal_lm
from posttrain.kernels import completion_logps
from tests.algos.grpo.helpers import make_trainer

PROMPTS = ["hi", "tell me a long story please", "why?", "a b c d e f g h"]


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    trainer = make_trainer(
        tmp_path_factory.mktemp("pos"),
        "model=tiny_gpt_oss",
        "model.arch.initializer_range=0.2",
        "model.dtype=bfloat16",
        "algo.trl.beta=0.04",
    )
    model, tok = trainer.model.eval(), trainer.processing_class
    lm = causal_lm(model)
    assert lm.dtype == torch.bfloat16 and lm.config.sliding_window == 4
    tok.padding_side = "left"
    enc = tok(
        [f"<|start|>user<|message|>{p}<|end|><|start|>assistant" for p in PROMPTS], return_tensors="pt", padding=True
    )
    n_new = 3 * lm.config.sliding_window + 2  # well past the window
    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            do_sample=False,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
    completion = out.sequences[:, enc.input_ids.shape[1] :]
    sampled = torch.stack([torch.log_softmax(x.float(), -1) for x in out.logits], 1)
    sampled = sampled.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    inputs = {
        "prompt_ids": enc.input_ids,
        "prompt_mask": enc.attention_mask,
        "completion_ids": completion,
        "completion_mask": torch.ones_like(completion),
    }
    return trainer, inputs, sampled


def _check(rescored: torch.Tensor, sampled: torch.Tensor, prompt_mask: torch.Tensor) -> None:
    padded = (prompt_mask == 0).any(1)
    assert int(padded.sum()) >= 3  # three left-padded rows of different padding
    diff = (rescored.float() - sampled).abs()
    # cached bf16 decoding vs one bf16 forward differ a little even unpadded (~5e-3 here); shifted positions ~0.1
    assert diff.mean() < 0.01, diff.mean(1)
    assert diff[padded].mean(1).max() < 0.01, diff.mean(1)


def test_trl_scoring_uses_the_generation_positions(rollout):
    """TRL's own log-prob pass (policy, old and reference log-probs on every path) in the trainer."""
    trainer, inputs, sampled = rollout
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, sampled.shape[1])
    _check(logps, sampled, inputs["prompt_mask"])


def test_kernel_path_scoring_uses_the_generation_positions(rollout):
    trainer, inputs, sampled = rollout
    lm = causal_lm(trainer.model)
    with torch.no_grad():
        hidden, _ = trainer._completion_hidden(lm, inputs)
        logps = completion_logps(
            hidden, lm.lm_head.weight, inputs["completion_ids"], inputs["completion_mask"], backend="eager"
        )
    _check(logps, sampled, inputs["prompt_mask"])
