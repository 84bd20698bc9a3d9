"""Every backend's log-probs, fed to TRL's `GRPOTrainer._compute_loss` through the trainer's kernel pass, give TRL's
own loss, gradients and metrics on a real (tiny) model: all eight loss types and TRL's knobs."""

from __future__ import annotations

import pytest
import torch

from posttrain.kernels import available, completion_logps
from posttrain.kernels.registry import LOSS_TYPES, refusal

from .trl_ref import completion_hidden, make_inputs, tiny_model, trl_loss

TORCH_BACKENDS = [b for b in ("eager", "chunked", "fused") if available(b)[0]]


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _run(model, inputs, backend=None, **kw):
    loss, metrics = trl_loss(model, inputs, backend=backend, **kw)
    return loss.item(), _grads(model, loss), metrics


def _assert_same(ref, got, rtol=2e-5, loss_rtol=1e-5):
    assert got[0] == pytest.approx(ref[0], rel=loss_rtol, abs=1e-6)
    assert ref[1].keys() == got[1].keys() and ref[1]
    for n in ref[1]:
        scale = ref[1][n].abs().max().clamp(min=1e-8)
        err = (ref[1][n] - got[1][n]).abs().max() / scale
        assert err < rtol, f"{n}: relative grad error {err:.2e}"
    assert ref[2].keys() == got[2].keys()
    for key, value in ref[2].items():
        assert got[2][key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key


def _check_backends(model, inputs, kw, ref, loss_rtol=1e-5) -> list[str]:
    """Every backend that computes `kw` against TRL's (loss, grads, metrics) `ref`; returns those checked."""
    checked = []
    bonus = kw.get("entropy_coef", 0.0) != 0.0 or kw.get("use_adaptive_entropy", False)
    for backend in TORCH_BACKENDS:
        if refusal(backend, top_entropy_quantile=kw.get("top_entropy_quantile", 1.0), entropy_bonus=bonus):
            continue
        _assert_same(ref, _run(model, inputs, backend, **kw), loss_rtol=loss_rtol)
        checked.append(backend)
    return checked


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level,beta", [("token", 0.0), ("token", 0.04), ("sequence", 0.0), ("sequence", 0.1)])
@pytest.mark.parametrize("num_iterations", [1, 2])
def test_loss_and_grads_match_trl(model, loss_type, level, beta, num_iterations):
    """All eight TRL 1.16 loss types on every backend, TRL's defaults throughout (KL bias correction on).
    num_iterations=1: on-policy, TRL passes no old log-probs (ratio 1 with the ratio's gradient); 2: old log-probs
    from before the previous update."""
    inputs = make_inputs(model, off_policy=0.3 if level == "token" else 0.6)
    if num_iterations == 1:
        inputs.pop("old_per_token_logps")
    kw = {"loss_type": loss_type, "beta": beta, "importance_sampling_level": level}
    ref = _run(model, inputs, **kw)
    # VESPO's fp32 per-sequence terms (+-7 here) cancel to a loss of ~1: its last bits follow the summation order
    checked = _check_backends(model, inputs, kw, ref, loss_rtol=5e-5 if loss_type == "vespo" else 1e-5)
    assert set(checked) == set(TORCH_BACKENDS)
    assert max(g.abs().max().item() for g in ref[1].values()) > 1e-3  # a real gradient, not a vanished loss


KNOB_CASES = {
    "delta-dapo": {"loss_type": "dapo", "delta": 1.1},
    "delta-luspo-seq": {"loss_type": "luspo", "importance_sampling_level": "sequence", "delta": 1.05},
    "sapo-temperatures": {"loss_type": "sapo", "sapo_temperature_pos": 2.0, "sapo_temperature_neg": 0.5},
    "vespo-parameters": {
        "loss_type": "vespo",
        "vespo_k_pos": 1.0,
        "vespo_lambda_pos": 1.5,
        "vespo_k_neg": 4.0,
        "vespo_lambda_neg": 0.5,
    },
    "cispo-eps-high": {"loss_type": "cispo", "epsilon_high": 1.1},
    "off-policy-mask-bnpo": {"loss_type": "bnpo", "off_policy_mask_threshold": 0.02, "beta": 0.04},
    "top-entropy-grpo": {"loss_type": "grpo", "top_entropy_quantile": 0.3, "beta": 0.04},
    "entropy-bonus-dapo": {"loss_type": "dapo", "entropy_coef": 0.05},
    "entropy-bonus-top-sapo": {"loss_type": "sapo", "entropy_coef": 0.1, "top_entropy_quantile": 0.4},
    "no-bias-correction-dapo": {"loss_type": "dapo", "beta": 0.1, "use_bias_correction_kl": False},
    **{f"accumulation-{t}": {"loss_type": t, "beta": 0.04, "accumulation_steps": 3} for t in LOSS_TYPES},
}


@pytest.mark.parametrize("name", list(KNOB_CASES))
def test_knobs_match_trl(model, name):
    """Each GRPOConfig knob (delta, sapo/vespo parameters, off-policy mask, top-entropy mask, entropy bonus, KL bias
    correction, accumulation normalisers) on every backend that can feed it; and each knob moves TRL's loss (against
    the loss without it), so the comparison has teeth."""
    kw = KNOB_CASES[name]
    inputs = make_inputs(model, off_policy=0.3)
    ref = _run(model, inputs, **kw)
    checked = _check_backends(model, inputs, kw, ref)
    assert "eager" in checked
    if kw.get("entropy_coef"):
        assert set(checked) == {"eager", "chunked"} & set(TORCH_BACKENDS)  # fused's entropy has no gradient
    plain = {k: kw[k] for k in ("loss_type", "beta", "importance_sampling_level") if k in kw}
    if "accumulation" not in name:
        assert abs(_run(model, inputs, **plain)[0] - ref[0]) > 1e-4, "the knob changes nothing here"


# vespo takes a per-token ratio only (config validation refuses the sequence modes with it)
IS_CASES = [
    (t, shape)
    for t in ("bnpo", "vespo", "cispo")
    for shape in ("token", "sequence")
    if (t, shape) != ("vespo", "sequence")
]


@pytest.mark.parametrize("loss_type,shape", IS_CASES)
def test_vllm_importance_sampling_ratio_matches_trl(model, loss_type, shape):
    """TRL's vLLM correction (`importance_sampling_ratio`, [B, T] or [B, 1], zeros where rejected) on every backend;
    VESPO folds a per-token ratio into its weight."""
    inputs = make_inputs(model)
    B, T = inputs["completion_ids"].shape
    ratio = torch.exp(0.4 * torch.randn(B, T if shape == "token" else 1, generator=torch.Generator().manual_seed(7)))
    ratio[0, 0] = 0.0
    kw = {"loss_type": loss_type, "beta": 0.05}
    without = _run(model, inputs, **kw)
    inputs["importance_sampling_ratio"] = ratio
    ref = _run(model, inputs, **kw)
    assert set(_check_backends(model, inputs, kw, ref, loss_rtol=5e-5)) == set(TORCH_BACKENDS)
    assert abs(without[0] - ref[0]) > 1e-4


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
    """old_logps absent (ratio 1, detached current log-probs) and temperature != 1, against TRL."""
    model = tiny_model(temperature=0.7)
    inputs = make_inputs(model)
    inputs.pop("old_per_token_logps")
    kw = {"loss_type": "dapo", "beta": 0.05, "temperature": 0.7}
    ref = _run(model, inputs, **kw)
    _assert_same(ref, _run(model, inputs, backend, **kw))
    assert ref[2]["clip_ratio/region_mean"] == 0.0
    assert abs(_run(model, inputs, backend, loss_type="dapo", beta=0.05)[0] - ref[0]) > 1e-4  # 1.0 is not 0.7


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_masked_positions_change_nothing_and_get_no_gradient(model, backend):
    """Garbage hidden states / ids at masked positions change neither the log-probs nor the unmasked gradient;
    an all-masked batch gives zeros and a zero (connected) gradient."""
    inputs = make_inputs(model)
    hidden = completion_hidden(model, inputs).detach()
    mask = inputs["completion_mask"]
    noisy = hidden.clone()
    noisy[mask == 0] = 1e3 * torch.randn_like(noisy[mask == 0])
    ids = inputs["completion_ids"].masked_fill(mask == 0, 0)
    weight = model.lm_head.weight.detach()
    cotangent = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3))
    out = []
    for h, y in ((hidden, inputs["completion_ids"]), (noisy, ids)):
        h = h.clone().requires_grad_()
        logps = completion_logps(h, weight, y, mask, backend=backend)
        (g,) = torch.autograd.grad((logps * cotangent).sum(), h)
        out.append((logps.detach(), g))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert out[0][1][mask == 0].abs().max() == 0 and out[0][0][mask == 0].abs().max() == 0
    h = hidden.clone().requires_grad_()
    empty = completion_logps(h, weight, ids, torch.zeros_like(mask), backend=backend)
    (g,) = torch.autograd.grad(empty.sum(), h)
    assert empty.abs().max() == 0 and g.abs().max() == 0


def test_an_unknown_backend_fails_fast(model):
    inputs = make_inputs(model)
    hidden = completion_hidden(model, inputs)
    with pytest.raises(ValueError, match="backend must be one of"):
        completion_logps(hidden, model.lm_head.weight, inputs["completion_ids"], inputs["completion_mask"], backend="x")
