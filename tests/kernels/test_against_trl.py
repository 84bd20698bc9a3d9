"""Every backend's loss, gradients and stats equal TRL's `GRPOTrainer._compute_loss` on a real (tiny) model."""

from __future__ import annotations

import inspect

import pytest
import torch

from posttrain.kernels import available, grpo_loss
from posttrain.kernels.registry import LOSS_TYPES, LOSSES, refusal

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


# TRL's ratio metrics per loss type, and the names our stats give them
RATIO_METRICS = {
    "clip": {
        "clip_ratio": "clip_ratio/region_mean",
        "clip_ratio/low_mean": "clip_ratio/low_mean",
        "clip_ratio/high_mean": "clip_ratio/high_mean",
    },
    "cispo": {"cispo_clip_ratio": "cispo_clip_ratio"},
    "sapo": {},
    "vespo": {"vespo/phi_seq_mean": "vespo/phi_seq_mean"},
}


def _refused(backend, **kw):
    """The registry's reason `backend` refuses these options (None: it must compute them)."""
    ours = {k: v for k, v in kw.items() if k in inspect.signature(refusal).parameters}
    if kw.get("entropy_coef"):
        ours["entropy_bonus"] = True
    ratio = kw.get("vllm_is_ratio")
    ours["token_is_ratio"] = ratio is not None and ratio.shape[-1] > 1
    return refusal(backend, **ours)


def _check_backends(model, inputs, trl_kw, ours_kw, ref, rtol=2e-5):
    """Every backend against TRL's (loss, grads, metrics) `ref`; a backend the registry refuses must raise."""
    ref_loss, ref_grads, ref_metrics = ref
    term = LOSSES[ours_kw.get("loss_type", "grpo")].term
    checked = []
    for backend in TORCH_BACKENDS:
        if _refused(backend, **ours_kw):
            with pytest.raises(NotImplementedError):
                _ours(model, inputs, backend, **ours_kw)
            continue
        loss, stats = _ours(model, inputs, backend, **ours_kw)
        # VESPO's fp32 per-sequence terms (+-7 here) cancel to a loss of ~1: each term within 3e-6 of TRL's, the sum's
        # last bits set by the order of reduction (Liger's kernel; the fused backend's on a CPU without AVX-512)
        vespo, loose = term == "vespo", backend == "liger" and term == "vespo"
        assert loss.item() == pytest.approx(ref_loss.item(), rel=5e-5 if vespo else 1e-5, abs=1e-6), backend
        _assert_close_grads(ref_grads, _grads(model, loss), 5e-5 if loose else rtol)
        for ours, theirs in RATIO_METRICS[term].items():
            if ours in stats:  # liger reports the region ratio only (token-weighted at sequence level)
                # and counts the clipped ratios before the delta cap (TRL after it)
                level_ok = backend != "liger" or (
                    ours_kw.get("importance_sampling_level", "token") == "token" and ours_kw.get("delta") is None
                )
                assert not level_ok or stats[ours] == pytest.approx(ref_metrics[theirs], abs=1e-6), (backend, ours)
            else:
                assert backend == "liger", (backend, ours)
        if trl_kw.get("beta", 0.0) != 0.0:
            assert stats["kl_mean"] == pytest.approx(ref_metrics["kl"], rel=1e-5), backend
            assert backend == "liger" or stats["kl_p95"] >= stats["kl_mean"] > 0, backend
        checked.append(backend)
    return checked


def _trl_ref(model, inputs, **trl_kw):
    loss, metrics = trl_loss(model, inputs, **trl_kw)
    return loss, _grads(model, loss), metrics


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level,beta", [("token", 0.0), ("token", 0.04), ("sequence", 0.0), ("sequence", 0.1)])
@pytest.mark.parametrize("num_iterations", [1, 2])
def test_loss_and_grads_match_trl(model, loss_type, level, beta, num_iterations):
    """All eight TRL 1.16 loss types on every backend, TRL's defaults throughout (KL bias correction on).
    num_iterations=1: on-policy, TRL passes no old log-probs (ratio 1 with the ratio's gradient); 2: old log-probs
    from before the previous update. TRL's loss is computed once and every backend compared with it."""
    inputs = make_inputs(model, off_policy=0.3 if level == "token" else 0.6)
    if num_iterations == 1:
        inputs.pop("old_per_token_logps")
    kw = {"loss_type": loss_type, "beta": beta, "importance_sampling_level": level}
    ref = _trl_ref(model, inputs, **kw)
    checked = _check_backends(model, inputs, kw, kw, ref)
    assert {"eager", "fused"} <= set(checked)
    assert max(g.abs().max().item() for g in ref[1].values()) > 1e-3  # a real gradient, not a vanished loss


def _knob_cases():
    """(id, TRL's kwargs, ours) for each GRPOConfig knob beyond the loss type, on the loss types it acts on."""
    window = {"window_tokens": None, "accumulation_steps": 3}  # window_tokens filled per batch below
    cases = [
        ("delta-dapo", {"loss_type": "dapo", "delta": 1.1}, {"delta": 1.1}),
        ("delta-luspo-seq", {"loss_type": "luspo", "importance_sampling_level": "sequence", "delta": 1.05}, None),
        ("sapo-temperatures", {"loss_type": "sapo", "sapo_temperature_pos": 2.0, "sapo_temperature_neg": 0.5}, None),
        (
            "vespo-parameters",
            {
                "loss_type": "vespo",
                "vespo_k_pos": 1.0,
                "vespo_lambda_pos": 1.5,
                "vespo_k_neg": 4.0,
                "vespo_lambda_neg": 0.5,
            },
            None,
        ),
        ("cispo-eps-high", {"loss_type": "cispo", "epsilon_high": 1.1}, None),
        ("off-policy-mask-bnpo", {"loss_type": "bnpo", "off_policy_mask_threshold": 0.02, "beta": 0.04}, None),
        ("off-policy-mask-vespo", {"loss_type": "vespo", "off_policy_mask_threshold": 0.02}, None),
        ("top-entropy-grpo", {"loss_type": "grpo", "top_entropy_quantile": 0.3, "beta": 0.04}, None),
        ("top-entropy-cispo", {"loss_type": "cispo", "top_entropy_quantile": 0.5}, None),
        ("entropy-bonus-dapo", {"loss_type": "dapo", "entropy_coef": 0.05}, None),
        ("entropy-bonus-top-sapo", {"loss_type": "sapo", "entropy_coef": 0.1, "top_entropy_quantile": 0.4}, None),
    ]
    for lt in LOSS_TYPES:  # the accumulation normaliser of every type, with an entropy bonus on the eager path
        cases.append((f"accumulation-{lt}", {"loss_type": lt, "beta": 0.04}, dict(window)))
    return [
        (name, trl, {**{k: v for k, v in trl.items() if k != "accumulation_steps"}, **(extra or {})})
        for name, trl, extra in cases
    ]


KNOB_CASES = _knob_cases()


@pytest.mark.parametrize("name,trl_kw,ours_kw", KNOB_CASES, ids=[c[0] for c in KNOB_CASES])
def test_knobs_match_trl(model, name, trl_kw, ours_kw):
    """Each GRPOConfig knob (delta, sapo/vespo parameters, off-policy mask, top-entropy mask, entropy bonus,
    accumulation normalisers) on every backend that computes it; the others refuse it. And each knob moves the
    loss (eager, against the loss without it), so the comparison has teeth."""
    inputs = make_inputs(model, off_policy=0.3)
    ours_kw = dict(ours_kw)
    if "accumulation_steps" in ours_kw:
        trl_kw = {**trl_kw, "accumulation_steps": ours_kw["accumulation_steps"]}
        ours_kw["window_tokens"] = inputs["completion_mask"].sum() * ours_kw["accumulation_steps"]
    ref = _trl_ref(model, inputs, **trl_kw)
    checked = _check_backends(model, inputs, trl_kw, ours_kw, ref)
    assert "eager" in checked
    if ours_kw.get("entropy_coef"):
        assert set(checked) == {"eager", "chunked"} & set(TORCH_BACKENDS)  # fused's entropy has no gradient
    base = {"loss_type": ours_kw["loss_type"], "beta": ours_kw.get("beta", 0.0)}
    base["importance_sampling_level"] = ours_kw.get("importance_sampling_level", "token")
    plain, _ = _ours(model, inputs, "eager", **base)
    assert abs(plain.item() - ref[0].item()) > 1e-4, "the knob changes nothing here"


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
    with pytest.raises(NotImplementedError, match=r"kl\.estimator"):
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


@pytest.mark.parametrize("loss_type", ["vespo", "cispo", "sapo", "luspo"])
def test_vllm_ratio_in_each_loss_type_matches_trl(model, loss_type):
    """A per-token vLLM importance-sampling ratio: VESPO folds it into its sequence weight, the others multiply
    their policy term by it, as TRL does; every backend that computes the case agrees."""
    inputs = make_inputs(model)
    B, T = inputs["completion_ids"].shape
    ratio = torch.exp(0.3 * torch.randn(B, T, generator=torch.Generator().manual_seed(5)))
    inputs["importance_sampling_ratio"] = ratio
    kw = {"loss_type": loss_type, "importance_sampling_level": "sequence" if loss_type == "luspo" else "token"}
    ref = _trl_ref(model, inputs, **kw)
    checked = _check_backends(model, inputs, kw, {**kw, "vllm_is_ratio": ratio}, ref)
    assert "fused" in checked
    without, _ = _ours(model, inputs, "eager", **kw)
    assert abs(without.item() - ref[0].item()) > 1e-4
