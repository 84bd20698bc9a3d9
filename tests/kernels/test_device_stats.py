"""The loss metrics `policy_loss_from_logps` returns: floats on read, in one transfer, and the KL p95 over unmasked
tokens only (computed without boolean indexing, which would synchronise the host with a GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.kernels.policy_loss import DeviceStats, policy_loss_from_logps


def _loss(mask: torch.Tensor, beta: float = 0.04):
    g = torch.Generator().manual_seed(0)
    logps = -torch.rand(3, 5, generator=g) * 4
    ref = logps + 0.3 * torch.randn(3, 5, generator=g)
    adv = torch.tensor([1.0, -0.5, 0.25])
    return logps, ref, policy_loss_from_logps(logps, mask, adv, logps.detach(), ref, beta=beta)


def test_stats_are_floats_and_p95_ignores_masked_tokens():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    logps, ref, (_, stats) = _loss(mask)
    assert isinstance(stats, DeviceStats)
    assert list(stats)[:3] == ["policy_loss", "kl_mean", "kl_p95"] and len(stats) == len(dict(stats))
    assert all(type(v) is float for v in stats.values())
    kl = torch.exp(ref - logps) - (ref - logps) - 1  # k3
    kept = kl[mask > 0]
    assert stats["kl_p95"] == pytest.approx(torch.quantile(kept, 0.95).item(), rel=1e-6)
    assert stats["kl_mean"] == pytest.approx(kept.mean().item(), rel=1e-6)
    # counting the masked tokens would move the p95
    kl_all = torch.quantile(kl.flatten(), 0.95).item()
    assert abs(kl_all - stats["kl_p95"]) > 1e-3


def test_no_unmasked_token_gives_nan_p95():
    _, _, (_, stats) = _loss(torch.zeros(3, 5))
    assert math.isnan(stats["kl_p95"]) and stats["kl_mean"] == 0.0
