"""The kernel path (`kernels=eager|chunked|liger|fused`) trains exactly like TRL's own loss path, in the trainer.

Each case trains a few real steps twice from one seed, once with `kernels=trl` and once with a kernel backend, and
compares every logged step: loss, grad norm, KL (mean and p95) and clip ratio. The cases cover what the kernel
path must reproduce of TRL: the KL bias correction (TRL's default), old log-probs (num_iterations > 1), gradient
accumulation with DAPO's window normaliser, sequence-level importance sampling, `scale_rewards` batch/none,
weighted rewards and zero-std groups. Then the terms TRL adds around the policy loss (MoE router aux loss, vLLM
importance-sampling ratio) on one batch.
"""

from __future__ import annotations

import pytest
import torch

from posttrain.kernels import available
from tests.algos.grpo.helpers import (
    first_batch,
    make_trainer,
    perturb_lora,
    prompt_dependent_reward,
)

BACKENDS = [b for b in ("eager", "chunked", "fused") if available(b)[0]]
# Every backend's single call is within ~1.5e-6 of fp64 (as is TRL's own fp32 log-softmax), but the cases train
# at lr 0.5, so two steps amplify fp32 rounding: fused's CPU flash path (another summation order) differed from
# TRL by 1.4e-5 relative in kl_p95 at step 2. The bugs these cases catch (a missing bias correction, a wrong
# normaliser, dropped aux loss) move the logged numbers by 1e-3 to 1 relative.


def length_reward(completions, **kwargs):
    return [len(str(c)) / 10.0 for c in completions]


def sea_groups_constant(prompts, completions, **kwargs):
    """Constant within every 'sea' group (zero std), completion length for the 'sky' groups."""
    return [1.0 if "sea" in str(p) else float(len(str(c))) for p, c in zip(prompts, completions)]


# SGD keeps the runs comparable at 1e-5 over steps (Adam's first step is sign(g): it amplifies rounding noise in
# near-zero gradient entries); a large step so that the KL and the ratios move by the second step.
COMMON = ("hw.optimizer=sgd", "trainer.lr=0.5", "trainer.max_steps=2")
CASES = {
    # KL bias correction with old log-probs and accumulation (DAPO normalises by the whole window's tokens)
    "dapo-iter2-accum2": (
        ("algo.trl.loss_type=dapo", "algo.trl.beta=0.1", "algo.trl.num_iterations=2", "trainer.grad_accum=2"),
        {},
    ),
    "grpo-sequence-batch-weighted": (
        (
            "algo.trl.importance_sampling_level=sequence",
            "algo.trl.scale_rewards=batch",
            "algo.trl.beta=0.04",
            "algo.trl.num_iterations=2",
        ),
        {"reward": [prompt_dependent_reward, length_reward], "weights": [1.0, 0.5]},
    ),
    "bnpo-unscaled-zero-std": (
        ("algo.trl.loss_type=bnpo", "algo.trl.scale_rewards=none", "algo.trl.beta=0.04"),
        {"reward": sea_groups_constant},
    ),
    "dr_grpo-no-kl": (("algo.trl.loss_type=dr_grpo", "algo.trl.beta=0.0", "algo.trl.num_iterations=2"), {}),
}
KEYS = ("loss", "grad_norm", "kl", "kl_p95", "clip_ratio/region_mean")
_trl_runs: dict[str, list[dict]] = {}


def _train(tmp_path, kernels: str, case: str) -> list[dict]:
    overrides, kwargs = CASES[case]
    trainer = make_trainer(tmp_path / kernels, f"kernels={kernels}", *COMMON, *overrides, **kwargs)
    trainer.train()
    return [h for h in trainer.state.log_history if "grad_norm" in h]


@pytest.mark.slow  # ~10 s per training run on a shared 2-core machine
@pytest.mark.parametrize(
    ("case", "backend"),
    # every case runs eager and fused; the accumulation case also covers chunked
    [(c, b) for c in CASES for b in BACKENDS if b in ("eager", "fused") or c == "dapo-iter2-accum2"],
)
def test_kernel_path_trains_like_trl(tmp_path, case, backend):
    if case not in _trl_runs:
        _trl_runs[case] = _train(tmp_path, "trl", case)
    ref, got = _trl_runs[case], _train(tmp_path, backend, case)
    assert [h["step"] for h in got] == [h["step"] for h in ref] and len(ref) >= 2
    for a, b in zip(ref, got):
        for key in KEYS:
            if a[key] is None:  # undefined on TRL's path (beta 0: no reference model): undefined here too
                assert b[key] is None, (key, b["step"])
            else:
                assert b[key] == pytest.approx(a[key], rel=5e-5, abs=1e-7), (key, b["step"])
    # the cases have teeth: a real update, a measured KL, the reward shaping actually in play
    assert any(h["grad_norm"] > 1e-3 for h in ref)
    if "algo.trl.beta=0.0" in CASES[case][0]:
        assert all(h["kl"] is None and h["kl_p95"] is None for h in ref)
    elif case != "bnpo-unscaled-zero-std":  # that one makes no update at step 1 (below): KL stays 0
        assert max(h["kl"] for h in ref) > 1e-5 and max(h["kl_p95"] for h in ref) >= max(h["kl"] for h in ref)
    if case == "bnpo-unscaled-zero-std":  # 'sea' groups have zero reward std: zero advantage, no gradient
        fracs = [h["frac_reward_zero_std"] for h in ref]
        assert set(fracs) <= {0.5, 1.0} and 0.5 in fracs
        assert all(b["grad_norm"] == 0.0 for a, b in zip(ref, got) if a["frac_reward_zero_std"] == 1.0)
    if case == "grpo-sequence-batch-weighted":
        r = ref[0]
        weighted = r["rewards/prompt_dependent_reward/mean"] + 0.5 * r["rewards/length_reward/mean"]
        assert r["reward"] == pytest.approx(weighted, rel=1e-6)


def _loss_and_grads(trainer, inputs, backend):
    trainer.kernel_backend = backend
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    metrics = {k: float(v[-1]) for k, v in trainer._metrics["train"].items() if v}
    return loss.item(), grads, metrics


def _assert_same(ref, got, rtol=1e-5):
    assert got[0] == pytest.approx(ref[0], rel=rtol, abs=1e-7)
    assert ref[1].keys() == got[1].keys() and ref[1]
    for n, g in ref[1].items():
        err = (g - got[1][n]).abs().max() / g.abs().max().clamp(min=1e-12)
        assert err < 2e-5, (n, float(err))


@pytest.fixture(scope="module")
def moe_batch(tmp_path_factory):
    """tiny_gpt_oss (MoE) with router_aux_loss_coef=0.5, one group, and TRL's loss on it."""
    trainer = make_trainer(
        tmp_path_factory.mktemp("moe"),
        "model=tiny_gpt_oss",
        "model.arch.router_aux_loss_coef=0.5",
        "algo.trl.beta=0.04",
        "trainer.per_device_batch_size=4",
        "algo.trl.max_completion_length=8",
    )
    inputs = first_batch(trainer)
    perturb_lora(trainer.model, scale=0.3)
    return trainer, inputs, _loss_and_grads(trainer, inputs, "trl")


@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_router_aux_loss_is_added_like_trl(moe_batch, backend):
    """TRL adds coef * load-balancing loss (scaled for accumulation) and logs `aux_loss`; the kernel path must too."""
    trainer, inputs, ref = moe_batch
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == 0.5
    got = _loss_and_grads(trainer, inputs, backend)
    assert ref[2]["aux_loss"] > 0.1
    assert got[2]["aux_loss"] == pytest.approx(ref[2]["aux_loss"], rel=1e-5)
    _assert_same(ref, got)


@pytest.fixture(scope="module")
def off_policy_batch(tmp_path_factory):
    """num_iterations=2: TRL computes old log-probs; the LoRA then moves (the update between the iterations)."""
    trainer = make_trainer(tmp_path_factory.mktemp("off"), "algo.trl.beta=0.1", "algo.trl.num_iterations=2")
    inputs = first_batch(trainer)
    assert inputs["old_per_token_logps"] is not None
    perturb_lora(trainer.model, scale=0.3)
    return trainer, inputs


@pytest.fixture
def configured(off_policy_batch):
    """The shared trainer with loss options set per test (they are plain attributes `_compute_loss` reads)."""
    trainer, inputs = off_policy_batch
    saved = {
        k: getattr(trainer, k)
        for k in (
            "loss_type",
            "importance_sampling_level",
            "use_vllm",
            "vllm_importance_sampling_correction",
            "current_gradient_accumulation_steps",
        )
    }
    saved_bias_correction = trainer.args.use_bias_correction_kl

    def configure(bias_correction: bool = saved_bias_correction, **attrs):
        for k, v in attrs.items():
            setattr(trainer, k, v)
        trainer.args.use_bias_correction_kl = bias_correction  # what algo.trl.use_bias_correction_kl maps to
        return trainer, dict(inputs)

    yield configure
    for k, v in saved.items():
        setattr(trainer, k, v)
    trainer.args.use_bias_correction_kl = saved_bias_correction


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss_type,level", [("grpo", "token"), ("dapo", "token"), ("bnpo", "sequence")])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_one_batch_off_policy_kernel_loss_equals_trl(configured, backend, loss_type, level, bias_correction):
    """num_iterations=2 and grad_accum=2 on one micro-batch: old log-probs from before an update, the KL bias
    correction on (TRL's default) and off, accumulation scaling (the loss type's own normaliser)."""
    trainer, inputs = configured(
        loss_type=loss_type,
        importance_sampling_level=level,
        current_gradient_accumulation_steps=2,
        bias_correction=bias_correction,
    )
    ref = _loss_and_grads(trainer, inputs, "trl")
    got = _loss_and_grads(trainer, inputs, backend)
    _assert_same(ref, got)
    for key in ["kl", "kl_p95", "clip_ratio/region_mean"]:
        assert got[2][key] == pytest.approx(ref[2][key], rel=1e-5, abs=1e-7), key
    assert ref[2]["kl"] > 1e-3 and ref[2]["clip_ratio/region_mean"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["token", "sequence"])
def test_vllm_importance_sampling_ratio_reaches_the_kernel_loss(configured, backend, shape):
    """With vLLM's correction on, TRL multiplies the policy term by `inputs["importance_sampling_ratio"]`
    ([B, T] token modes, [B, 1] sequence modes); the kernel path must read and apply the same tensor."""
    trainer, inputs = configured(use_vllm=True, vllm_importance_sampling_correction=True)  # as TRL's vLLM sets
    B, T = inputs["completion_ids"].shape
    gen = torch.Generator().manual_seed(3)
    inputs["importance_sampling_ratio"] = torch.exp(0.5 * torch.randn(B, T if shape == "token" else 1, generator=gen))
    ref = _loss_and_grads(trainer, inputs, "trl")
    got = _loss_and_grads(trainer, inputs, backend)
    _assert_same(ref, got)
    # the ratio changes the loss (the case has teeth): without the correction TRL leaves it out
    trainer.vllm_importance_sampling_correction = False
    plain = _loss_and_grads(trainer, inputs, backend)
    assert abs(plain[0] - got[0]) > 1e-4


@pytest.mark.parametrize("kernels", ["trl", "fused"])
def test_kl_is_logged_as_null_without_a_reference(tmp_path, kernels):
    """beta = 0: TRL loads no reference model, so there is no KL to measure: `kl` and `kl_p95` are null on every
    path (logged, not missing)."""
    trainer = make_trainer(tmp_path, "algo.trl.beta=0.0", f"kernels={kernels}")
    inputs = first_batch(trainer)
    assert inputs.get("ref_per_token_logps") is None
    trainer._compute_loss(trainer.model, inputs)
    trainer.log({"loss": 0.0})
    logged = trainer.state.log_history[-1]
    assert "kl" in logged and "kl_p95" in logged
    assert logged["kl"] is None and logged["kl_p95"] is None


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_kl_layer_reduces_like_trl(configured, loss_type, level):
    """k1/k2 are added over TRL's loss by the trainer (`kl_estimators`): run k3 through that layer too and it must
    give TRL's own k3 loss and gradients, for every normaliser (accumulation 2)."""
    trainer, inputs = configured(
        loss_type=loss_type, importance_sampling_level=level, current_gradient_accumulation_steps=2
    )
    ref = _loss_and_grads(trainer, inputs, "trl")
    trainer.trl_kl_estimators = ()  # k3 now comes from the layer, TRL's loss runs with beta 0
    try:
        got = _loss_and_grads(trainer, inputs, "trl")
        fused = _loss_and_grads(trainer, inputs, "fused")
    finally:
        del trainer.trl_kl_estimators
    _assert_same(ref, got)
    _assert_same(ref, fused)
    assert got[2]["kl"] == pytest.approx(ref[2]["kl"], rel=1e-6) and ref[2]["kl"] > 1e-3


@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_k1_and_k2_are_the_same_on_every_backend_and_differ_from_k3(configured, estimator):
    trainer, inputs = configured(loss_type="dapo")
    k3 = _loss_and_grads(trainer, inputs, "trl")
    trainer.kl_estimator = estimator
    try:
        runs = {b: _loss_and_grads(trainer, inputs, b) for b in ("trl", *BACKENDS)}
    finally:
        trainer.kl_estimator = "k3"
    for b in BACKENDS:
        _assert_same(runs["trl"], runs[b])
    assert abs(runs["trl"][0] - k3[0]) > 1e-5 and runs["trl"][2]["kl"] != pytest.approx(k3[2]["kl"], rel=1e-3)
