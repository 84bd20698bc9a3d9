"""Every backend's loss, gradients and stats equal TRL's `GRPOTrainer._compute_loss` on a real (tiny) model."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.kernels import available, grpo_loss

from .trl_ref import completion_hidden, make_inputs, tiny_model, trl_loss

TORCH_BACKENDS = [b for b in ("eager", "chunked", "liger", "fused") if available(b)[0]]


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _ours(model, inputs, backend, **kw):
    hidden = completion_hidden(model, inputs)
    return grpo_loss(
        hidden,
        model.lm_head.weight,
        inputs["completion_ids"],
        inputs["completion_mask"],
        inputs["advantages"],
        inputs.get("old_per_token_logps"),
        inputs.get("ref_per_token_logps"),
        backend=backend,
        **kw,
    )


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_close_grads(ref, got, rtol):
    assert ref.keys() == got.keys()
    for n in ref:
        scale = ref[n].abs().max().clamp(min=1e-8)
        err = (ref[n] - got[n]).abs().max() / scale
        assert err < rtol, f"{n}: relative grad error {err:.2e}"


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level,beta", [("token", 0.0), ("token", 0.04), ("sequence", 0.0), ("sequence", 0.1)])
@pytest.mark.parametrize("num_iterations", [1, 2])
def test_loss_and_grads_match_trl(model, backend, loss_type, level, beta, num_iterations):
    """TRL's defaults throughout (KL bias correction on). num_iterations=1: on-policy, TRL passes no old
    log-probs (ratio 1 with the ratio's gradient); 2: old log-probs from before the previous update."""
    inputs = make_inputs(model, off_policy=0.3 if level == "token" else 0.6)
    if num_iterations == 1:
        inputs.pop("old_per_token_logps")
    ref_loss, ref_metrics = trl_loss(model, inputs, loss_type=loss_type, beta=beta, importance_sampling_level=level)
    ref_grads = _grads(model, ref_loss)
    loss, stats = _ours(model, inputs, backend, loss_type=loss_type, beta=beta, importance_sampling_level=level)
    grads = _grads(model, loss)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-6)
    _assert_close_grads(ref_grads, grads, rtol=2e-5)
    assert stats["clip_ratio"] == pytest.approx(ref_metrics["clip_ratio/region_mean"], abs=1e-6) or (
        backend == "liger" and level == "sequence"
    )  # liger's clip ratio is token-weighted at sequence level
    if beta != 0.0:
        assert stats["kl_mean"] == pytest.approx(ref_metrics["kl"], rel=1e-5)
    if backend != "liger":
        assert stats["clip_ratio/low_mean"] == pytest.approx(ref_metrics["clip_ratio/low_mean"], abs=1e-6)
        assert stats["clip_ratio/high_mean"] == pytest.approx(ref_metrics["clip_ratio/high_mean"], abs=1e-6)
        assert math.isfinite(stats["kl_p95"]) and stats["kl_p95"] >= 0.0


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_kl_bias_correction_off_matches_trl_and_differs_from_on(model, backend, level):
    """`use_bias_correction_kl=False` (algo.kl.bias_correction=false) is TRL's plain k3; the flag changes the loss."""
    inputs = make_inputs(model, off_policy=0.3 if level == "token" else 0.6)
    kw = {"loss_type": "dapo", "beta": 0.1, "importance_sampling_level": level}
    ref_loss, ref_metrics = trl_loss(model, inputs, use_bias_correction_kl=False, **kw)
    ref_grads = _grads(model, ref_loss)
    loss, stats = _ours(model, inputs, backend, kl_bias_correction=False, **kw)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-6)
    _assert_close_grads(ref_grads, _grads(model, loss), rtol=2e-5)
    assert stats["kl_mean"] == pytest.approx(ref_metrics["kl"], rel=1e-5)
    on, _ = _ours(model, inputs, backend, kl_bias_correction=True, **kw)
    assert abs(on.item() - loss.item()) > 1e-4  # 50x the parity tolerance


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
@pytest.mark.parametrize("shape", ["token", "sequence"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_vllm_importance_sampling_ratio_matches_trl(model, backend, shape, level):
    """TRL's vLLM correction: the policy term times `importance_sampling_ratio` ([B, T] in token_* modes, [B, 1]
    in sequence_* modes, zeros where masked out), before the KL is added."""
    inputs = make_inputs(model, off_policy=0.3 if level == "token" else 0.6)
    g = torch.Generator().manual_seed(7)
    B, T = inputs["completion_ids"].shape
    ratio = torch.exp(0.4 * torch.randn(B, T if shape == "token" else 1, generator=g))
    ratio[0, 0] = 0.0  # a masked-out (rejected) sample
    inputs["importance_sampling_ratio"] = ratio
    kw = {"loss_type": "bnpo", "beta": 0.05, "importance_sampling_level": level}
    ref_loss, _ = trl_loss(model, inputs, **kw)
    ref_grads = _grads(model, ref_loss)
    loss, _ = _ours(model, inputs, backend, vllm_is_ratio=ratio, **kw)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-6)
    _assert_close_grads(ref_grads, _grads(model, loss), rtol=2e-5)
    without, _ = _ours(model, inputs, backend, **kw)
    assert abs(without.item() - loss.item()) > 1e-4


def test_inputs_exercise_clipping_and_empty_rows(model):
    """The fixture is not degenerate: both clip sides fire at token level, sequence level clips, a row is empty."""
    inputs = make_inputs(model)
    assert (inputs["completion_mask"].sum(1) == 0).any()
    _, m = trl_loss(model, inputs, loss_type="grpo", beta=0.0)
    assert m["clip_ratio/low_mean"] > 0 and m["clip_ratio/high_mean"] > 0
    _, m = trl_loss(model, make_inputs(model, off_policy=0.6), importance_sampling_level="sequence")
    assert m["clip_ratio/region_mean"] > 0


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_on_policy_and_temperature_match_trl(backend):
    """old_logps=None (ratio 1, detached current log-probs) and temperature != 1, against TRL."""
    model = tiny_model(temperature=0.7)
    inputs = make_inputs(model)
    inputs.pop("old_per_token_logps")
    ref_loss, _ = trl_loss(model, inputs, loss_type="dapo", beta=0.05)
    ref_grads = _grads(model, ref_loss)
    loss, stats = _ours(model, inputs, backend, loss_type="dapo", beta=0.05, temperature=0.7)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-6)
    _assert_close_grads(ref_grads, _grads(model, loss), rtol=2e-5)
    assert stats["clip_ratio"] == 0.0


@pytest.mark.parametrize("backend", [b for b in TORCH_BACKENDS if b != "liger"])
@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_k1_k2_match_eager_fp64(model, backend, estimator):
    """TRL only has k3; k1/k2 are checked against the fp64 eager reference, and differ from k3."""
    inputs = make_inputs(model)
    kw = dict(loss_type="bnpo", beta=0.1, kl_estimator=estimator)
    loss, stats = _ours(model, inputs, backend, **kw)
    model64 = tiny_model().double()
    inputs64 = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
    ref, ref_stats = _ours(model64, inputs64, "eager", **kw)
    k3, _ = _ours(model, inputs, backend, loss_type="bnpo", beta=0.1, kl_estimator="k3")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert stats["kl_mean"] == pytest.approx(ref_stats["kl_mean"], rel=1e-4)
    assert abs(loss.item() - k3.item()) > 1e-4


def test_liger_refuses_what_it_cannot_do(model):
    inputs = make_inputs(model)
    if not available("liger")[0]:
        pytest.skip(available("liger")[1])
    with pytest.raises(NotImplementedError, match="kl_estimator"):
        _ours(model, inputs, "liger", beta=0.1, kl_estimator="k2")
    hidden = completion_hidden(model, inputs)
    with pytest.raises(NotImplementedError, match="advantages"):
        grpo_loss(
            hidden,
            model.lm_head.weight,
            inputs["completion_ids"],
            inputs["completion_mask"],
            inputs["advantages"][:, None].expand(-1, hidden.shape[1]),
            backend="liger",
        )


def test_prompt_padding_and_masked_tokens_do_not_change_loss(model):
    """Garbage hidden states / ids at masked positions change neither the loss nor the unmasked gradient."""
    inputs = make_inputs(model)
    hidden = completion_hidden(model, inputs).detach()
    mask = inputs["completion_mask"]
    noisy = hidden.clone()
    noisy[mask == 0] = 1e3 * torch.randn_like(noisy[mask == 0])
    ids = inputs["completion_ids"].masked_fill(mask == 0, 0)
    out = []
    for h, y in ((hidden, inputs["completion_ids"]), (noisy, ids)):
        h = h.clone().requires_grad_()
        loss, _ = grpo_loss(
            h,
            model.lm_head.weight.detach(),
            y,
            mask,
            inputs["advantages"],
            inputs["old_per_token_logps"],
            backend="fused",
        )
        loss.backward()
        out.append((loss.item(), h.grad))
    assert out[0][0] == out[1][0]
    assert torch.equal(out[0][1], out[1][1])
    assert out[0][1][mask == 0].abs().max() == 0


def test_all_masked_batch_gives_zero_loss_and_grad(model):
    inputs = make_inputs(model)
    hidden = completion_hidden(model, inputs).detach().requires_grad_()
    mask = torch.zeros_like(inputs["completion_mask"])
    for backend in TORCH_BACKENDS:
        loss, stats = grpo_loss(
            hidden, model.lm_head.weight.detach(), inputs["completion_ids"], mask, inputs["advantages"], backend=backend
        )
        (g,) = torch.autograd.grad(loss, hidden)
        assert loss.item() == 0.0 and g.abs().max() == 0, backend


def test_bad_options_fail_fast(model):
    inputs = make_inputs(model)
    with pytest.raises(ValueError, match="ref_logps"):
        _ours(model, {**inputs, "ref_per_token_logps": None}, "fused", beta=0.1)
    with pytest.raises(ValueError, match="loss_type"):
        _ours(model, inputs, "fused", loss_type="ppo")
    with pytest.raises(ValueError, match="kl_estimator"):
        _ours(model, inputs, "fused", kl_estimator="k4")
    with pytest.raises(ValueError, match="backend"):
        _ours(model, inputs, "nope")
