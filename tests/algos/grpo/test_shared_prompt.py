"""Each distinct prompt runs once (`algo.share_prompts`): the same loss, log-probs and gradients as the plain
forward over every [prompt; completion] row, on left-padded prompts in any row order, a sliding window included."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.grpo.policy_forward import causal_lm
from posttrain.models.shared_prompt import distinct_rows, shared_prompt_hidden
from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora

ROW_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = make_trainer(tmp_path_factory.mktemp("shared"), "model.arch.initializer_range=0.2", "kernels=eager")
    perturb_lora(trainer.model)
    return trainer


def _loss_and_grads(trainer, inputs, share: bool):
    trainer.share_prompts = share
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def test_distinct_rows_finds_each_prompt_once():
    ids = torch.tensor([[0, 5, 6], [1, 2, 3], [0, 5, 6], [1, 2, 3], [0, 5, 7]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, inverse = distinct_rows(ids, mask)
    assert torch.equal(ids[first][inverse], ids)  # every row gets its own prompt back
    assert sorted(first.tolist()) == [0, 1, 4]  # the first row of each distinct prompt
    same_ids_other_mask = mask.clone()
    same_ids_other_mask[2, 0] = 1  # a padding token that counts is another prompt
    assert len(distinct_rows(ids, same_ids_other_mask)[0]) == 4
    assert distinct_rows(ids[[0, 1, 4]], mask[[0, 1, 4]]) is None  # nothing shared: the plain forward runs


def test_shared_prompt_forward_gives_the_plain_loss_and_gradients(trainer):
    inputs = first_batch(trainer)
    assert distinct_rows(inputs["prompt_ids"], inputs["prompt_mask"])[0].numel() == 2  # 2 prompts x 4 completions
    inputs["completion_mask"][1, 5:] = 0  # two completions that ended early (left-padded prompts: the test below)
    inputs["completion_mask"][6, 9:] = 0
    calls = []
    backbone = causal_lm(trainer.model).model
    hook = backbone.register_forward_pre_hook(lambda m, a, k: calls.append(k["input_ids"].shape), with_kwargs=True)
    try:
        shared_loss, shared_grads = _loss_and_grads(trainer, inputs, share=True)
    finally:
        hook.remove()
    plain_loss, plain_grads = _loss_and_grads(trainer, inputs, share=False)
    p, t = inputs["prompt_ids"].size(1), inputs["completion_ids"].size(1)
    assert calls == [torch.Size([2, p]), torch.Size([8, t])]  # the prompts once, then the completions
    assert shared_loss != 0 and torch.allclose(shared_loss, plain_loss, rtol=1e-5, atol=1e-7)
    lora = [n for n in plain_grads if "lora" in n and "q_proj" in n]
    assert lora and shared_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert grad.abs().max() > 0 or "lora_B" not in name
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_shared_prompt_hidden_with_a_sliding_window_and_shuffled_rows(tmp_path):
    trainer = make_trainer(tmp_path, "model=tiny_gpt_oss", "model.arch.initializer_range=0.2")
    lm = causal_lm(trainer.model).eval()
    assert lm.config.sliding_window == 4
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(5, 200, (3, 9), generator=gen)
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[1, :3] = 0  # left padding
    prompt_mask[2, :6] = 0
    order = torch.tensor([2, 0, 1, 0, 2, 1, 1])
    completions = torch.randint(5, 200, (7, 6), generator=gen)
    completion_mask = torch.ones_like(completions)
    completion_mask[3, 4:] = 0  # ended early
    rows = (prompts[order], prompt_mask[order], completions, completion_mask)
    with torch.no_grad():
        shared = shared_prompt_hidden(lm.model, *rows)
        trainer.share_prompts = False
        plain, _ = trainer._completion_hidden(lm, dict(zip(ROW_KEYS, rows)), aux=False)
    assert shared is not None and shared.shape == plain.shape == (7, 6, lm.config.hidden_size)
    torch.testing.assert_close(shared, plain, rtol=1e-4, atol=1e-5)
