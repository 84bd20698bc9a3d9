"""The policy entropy the fused kernel returns from its own pass (H = lse - h . e / T), against the entropy of the
materialized softmax, on each of its implementations (ATen flash fp32/bf16, the tile loop), and in the trainer's
`entropy` metric on the kernel path."""

from __future__ import annotations

import pytest
import torch

from posttrain.kernels import fused
from posttrain.kernels.loss import completion_logps, completion_logps_entropy
from posttrain.kernels.registry import BACKENDS


def _reference(hidden, weight, targets, temperature):
    logits = hidden.double() @ weight.double().t() / temperature
    logp = torch.log_softmax(logits, -1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


def _inputs(dtype, n=37, h=48, v=3000, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, h, generator=g) * scale / h**0.5).to(dtype)
    weight = torch.randn(v, h, generator=g).to(dtype)
    return hidden, weight, torch.randint(0, v, (n,), generator=g)


@pytest.mark.parametrize(
    ("dtype", "flash", "tol"),
    [
        (torch.float64, False, 1e-10),
        (torch.float32, True, 1e-4),
        (torch.float32, False, 1e-4),
        (torch.bfloat16, True, 0.05),
    ],
)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_matches_the_softmax(monkeypatch, dtype, flash, tol, temperature):
    monkeypatch.setattr(fused, "CPU_FLASH", flash)
    monkeypatch.setattr(fused, "VOCAB_BLOCK", 512)  # several tiles on the tile loop
    hidden, weight, targets = _inputs(dtype)
    logp, entropy = fused.fused_logps_entropy(hidden, weight, targets, temperature)
    ref_logp, ref_entropy = _reference(hidden, weight, targets, temperature)
    assert ref_entropy.min() > 0.5 and ref_entropy.max() < 8.0  # neither one-hot nor uniform: a real test
    torch.testing.assert_close(entropy.double(), ref_entropy, atol=tol, rtol=tol)
    torch.testing.assert_close(logp.double(), ref_logp, atol=max(tol, 1e-5) * 5, rtol=0)
    assert not entropy.requires_grad


def test_peaked_rows_keep_a_small_nonnegative_entropy():
    """Logits in the hundreds: lse and h . e / T nearly cancel; the difference stays accurate and >= 0."""
    hidden, weight, targets = _inputs(torch.float32, scale=400.0)
    _, entropy = fused.fused_logps_entropy(hidden, weight, targets)
    _, ref = _reference(hidden, weight, targets, 1.0)
    assert (ref < 1e-3).sum() > 10  # mostly one-hot rows
    assert entropy.min() >= 0
    torch.testing.assert_close(entropy.double(), ref, atol=2e-3, rtol=1e-3)


def test_completion_entropy_is_zero_where_masked_and_none_without_a_kernel_pass():
    hidden, weight, targets = _inputs(torch.float32, n=12)
    hidden, targets = hidden.view(3, 4, -1).requires_grad_(), targets.view(3, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    logps, entropy = completion_logps_entropy(hidden, weight, targets, mask, backend="fused")
    assert torch.equal(logps, completion_logps(hidden, weight, targets, mask, backend="fused"))
    _, ref = _reference(hidden.detach().view(12, -1), weight, targets.view(12), 1.0)
    keep = mask.view(12).bool()
    torch.testing.assert_close(entropy.view(12)[keep].double(), ref[keep], atol=1e-4, rtol=1e-4)
    assert (entropy.view(12)[~keep] == 0).all()
    logps.sum().backward()  # the log-probs still carry the gradient
    assert hidden.grad is not None and hidden.grad[1, 1:].abs().sum() == 0
    no_entropy = [n for n, b in BACKENDS.items() if b.entropy_function is None]
    assert no_entropy == ["pallas"]  # only asked for its name: JAX need not be installed
    eager_logps, eager_entropy = completion_logps_entropy(hidden, weight, targets, mask, backend="eager", grad=True)
    torch.testing.assert_close(eager_entropy.detach(), entropy, atol=1e-4, rtol=1e-4)
    assert eager_entropy.requires_grad


@pytest.mark.parametrize("backend", ["eager", "chunked"])
def test_entropy_gradient_matches_autograd_of_the_softmax(backend):
    """The entropy bonus's gradient (eager, chunked): d(sum_n c_n H_n)/d hidden against fp64 autograd."""
    hidden, weight, targets = _inputs(torch.float32, n=12, v=500)
    hidden = hidden.view(3, 4, -1).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    coef = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    _, entropy = completion_logps_entropy(hidden, weight, targets.view(3, 4), mask, backend=backend, grad=True)
    (grad,) = torch.autograd.grad((entropy * coef).sum(), hidden)
    h64 = hidden.detach().double().requires_grad_()
    logp = torch.log_softmax(h64 @ weight.double().t(), -1)
    ref_entropy = -(logp.exp() * logp).sum(-1) * mask
    (ref,) = torch.autograd.grad((ref_entropy * coef).sum(), h64)
    torch.testing.assert_close(grad.double(), ref, atol=1e-5 * ref.abs().max().item(), rtol=0)
    assert ref.abs().max() > 1e-2 and grad[1, 1:].abs().sum() == 0


def test_fused_refuses_an_entropy_gradient():
    hidden, weight, targets = _inputs(torch.float32, n=4)
    with pytest.raises(NotImplementedError, match="entropy gradient"):
        completion_logps_entropy(hidden.view(1, 4, -1), weight, targets.view(1, 4), torch.ones(1, 4), grad=True)
