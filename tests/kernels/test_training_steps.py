"""A few optimizer steps of a tiny model on TRL's loss: `fused` and `eager` log-probs give the same loss trajectory
from one seed."""

from __future__ import annotations

import pytest
import torch

from .trl_ref import make_inputs, tiny_model, trl_loss


def _trajectory(backend: str, steps: int = 5, full_finetune: bool = True) -> list[float]:
    model = tiny_model(seed=3)
    inputs = make_inputs(model, B=4, P=4, T=6, seed=5)
    model.lm_head.weight.requires_grad_(full_finetune)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss, _ = trl_loss(model, inputs, backend=backend, beta=0.04, loss_type="dapo")
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("full_finetune", [True, False])
def test_fused_and_eager_train_identically(full_finetune):
    eager = _trajectory("eager", full_finetune=full_finetune)
    fused = _trajectory("fused", full_finetune=full_finetune)
    assert len(set(round(x, 6) for x in eager)) > 1  # the loss actually moves
    for a, b in zip(eager, fused):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
