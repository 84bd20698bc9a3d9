"""The per-token KL estimators against closed forms, as values and as loss terms (their gradients).

Tokens x are sampled from the policy p = softmax(theta) and the sample is not differentiated (as in GRPO), so a
loss term f(x) contributes E_p[grad f(x)]. With q the reference and KL = KL(p || q):
    values:    E[k1] = E[k3] = KL;  E[k2] = E[(log p/q)^2] / 2 != KL
    gradients: E[grad k1] = sum p grad log p = 0                         (k1 pulls on nothing in expectation)
               E[grad k2] = sum p log(p/q) grad log p = grad KL(p || q)
               E[grad k3] = sum (p - q) grad log p   = grad KL(q || p)   (the forward KL's gradient)
    times the importance weight (TRL's `use_bias_correction_kl`, value 1 on-policy, gradient grad log p):
               E[grad (w k1)] = E[grad (w k3)] = grad KL(p || q)
Exact expectations enumerate the vocabulary weighted by p; one Monte Carlo check goes through the loss itself.
"""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.grpo.kl_estimators import kl_term

V = 7


def _dists(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    theta = (1.5 * torch.randn(V, generator=g, dtype=torch.float64)).requires_grad_()
    ref = torch.log_softmax(1.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    return theta, ref


def _grad(f, theta):
    (g,) = torch.autograd.grad(f, theta, retain_graph=True)
    return g


def _closed_forms(theta, ref):
    logp = torch.log_softmax(theta, -1)
    p, q = logp.exp(), ref.exp()
    reverse = (p * (logp - ref)).sum()  # KL(p || q)
    forward = (q * (ref - logp)).sum()  # KL(q || p)
    return reverse, _grad(reverse, theta), _grad(forward, theta)


def _expected_term(theta, ref, estimator, bias_correction):
    """E_{x~p}[kl term(x)] with the sample held fixed: every token once, weighted by the (detached) p(x)."""
    logp = torch.log_softmax(theta, -1)
    kl = kl_term(
        logp.unsqueeze(0),
        ref.unsqueeze(0),
        torch.ones(1, V),
        None,
        estimator=estimator,
        bias_correction=bias_correction,
        importance_sampling_level="token",
    )
    return (logp.detach().exp() * kl.squeeze(0)).sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_values_against_the_closed_form(seed):
    theta, ref = _dists(seed)
    kl, _, _ = _closed_forms(theta, ref)
    assert kl.item() > 0.05
    for est in ("k1", "k3"):
        assert _expected_term(theta, ref, est, False).item() == pytest.approx(kl.item(), rel=1e-12)
    k2 = _expected_term(theta, ref, "k2", False).item()
    assert abs(k2 - kl.item()) > 1e-3 * kl.item()  # k2 is only second-order close


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_gradients_as_loss_terms(seed):
    theta, ref = _dists(seed)
    _, grad_reverse, grad_forward = _closed_forms(theta, ref)
    assert grad_reverse.abs().max() > 1e-2 and (grad_reverse - grad_forward).abs().max() > 1e-3

    def grad_of(est, bc):
        return _grad(_expected_term(theta, ref, est, bc), theta)

    assert grad_of("k1", False).abs().max() < 1e-12  # zero expected gradient
    torch.testing.assert_close(grad_of("k2", False), grad_reverse, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad_of("k3", False), grad_forward, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad_of("k3", True), grad_reverse, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad_of("k1", True), grad_reverse, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "estimator,bias_correction,target", [("k1", False, "zero"), ("k3", False, "forward"), ("k3", True, "reverse")]
)
def test_sampled_loss_term_gradient(estimator, bias_correction, target):
    """Monte Carlo through `kl_term` and a token mean (bnpo's reduction, what the trainer adds for k1/k2)."""
    theta, ref = _dists(0)
    _, grad_reverse, grad_forward = _closed_forms(theta, ref)
    expected = {"zero": torch.zeros(V, dtype=torch.float64), "forward": grad_forward, "reverse": grad_reverse}[target]
    n = 400_000
    logp = torch.log_softmax(theta, -1)
    x = torch.multinomial(logp.detach().exp(), n, replacement=True, generator=torch.Generator().manual_seed(5))
    kl = kl_term(
        logp[x].unsqueeze(0),
        ref[x].unsqueeze(0),
        torch.ones(1, n),
        None,
        estimator=estimator,
        bias_correction=bias_correction,
        importance_sampling_level="token",
    )
    loss = kl.mean()
    kl_exact, _, _ = _closed_forms(theta, ref)
    if estimator in ("k1", "k3"):
        assert loss.item() == pytest.approx(kl_exact.item(), rel=0.02)
    # standard error of the mean gradient here is ~1e-3; the closed forms differ by far more than the tolerance
    assert (_grad(loss, theta) - expected).abs().max() < 6e-3
    assert (grad_reverse - grad_forward).abs().max() > 0.05 and grad_reverse.abs().max() > 0.05
