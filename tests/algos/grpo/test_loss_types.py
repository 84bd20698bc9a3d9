"""TRL 1.16's eight GRPO loss types and its loss knobs under `algo.trl.*`: the one-line refusals of what a kernel
backend cannot compute, and `build_trainer(...).train()` for every loss type with `kernels=trl`, `eager` and `fused`,
the kernel paths logging TRL's own numbers."""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOConfig

from posttrain.algos.grpo.build import build_trainer
from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from posttrain.kernels.registry import LOSS_TYPES, LOSSES
from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora


def test_loss_types_are_trls():
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    trl_types = {
        t for t in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo") if f"'{t}'" in help_text
    }
    assert set(LOSS_TYPES) == trl_types and len(LOSS_TYPES) == 8


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["kernels=fused", "algo.trl.entropy_coef=0.01"], "fused lacks (eager, chunked have it)"),
        (["kernels=fused", "algo.trl.use_adaptive_entropy=true"], "entropy gradient"),
        (["kernels=pallas", "algo.trl.top_entropy_quantile=0.5"], "pallas does not compute"),
        (["algo.trl.entropy_coef_min=0.5", "algo.trl.entropy_coef_max=0.1"], "entropy_coef_min"),
        (["algo.trl.sync_ref_model=true"], "sync_ref_model"),  # LoRA by default: TRL cannot sync its reference
        (["algo.trl.top_entropy_quantile=1.5"], "algo.trl.top_entropy_quantile"),
        (["algo.trl.loss_type=ppo"], "algo.trl.loss_type"),
        (["algo.trl.vllm_importance_sampling_mode=seq"], "vllm_importance_sampling_mode"),
        (
            ["trainer.per_device_batch_size=4", "algo.trl.num_generations=8", "algo.trl.steps_per_generation=3"],
            "per_device_batch_size*algo.trl.steps_per_generation*devices=12",
        ),
    ],
)
def test_what_cannot_run_is_one_line(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "overrides, kernel",
    [
        ([], "fused"),  # hw=cpu's kernel
        (["algo.kl.estimator=k1", "algo.trl.beta=0.01"], "fused"),  # every backend has every estimator
        (["algo.trl.use_adaptive_entropy=true"], "trl"),  # fused has no entropy gradient: TRL's own head
    ],
)
def test_the_profiles_kernel_gives_way_to_one_that_computes_the_loss(overrides, kernel):
    from posttrain.hardware import apply_profile

    cfg = load_config(overrides)
    assert cfg.kernels.backend == "trl"  # hw=cpu's GRPO default (fused) applies with the profile
    apply_profile(cfg, overrides=set())
    assert cfg.kernels.backend == kernel


def test_a_kernel_chosen_on_the_command_line_is_kept_or_refused():
    from posttrain.hardware import apply_profile

    cfg = load_config(["kernels=trl", "algo.kl.estimator=k1", "algo.trl.beta=0.01"])  # hw=cpu would pick fused
    apply_profile(cfg, overrides={"kernels"})
    assert cfg.kernels.backend == "trl"
    with pytest.raises(ConfigError, match=r"^kernels=fused: the entropy bonus \(entropy_coef\) needs an entropy"):
        load_config(["kernels=fused", "algo.trl.entropy_coef=0.01"])


def test_what_can_run_composes():
    for overrides in (
        ["kernels=trl", "algo.kl.estimator=k2", "algo.trl.beta=0.01", "algo.trl.loss_type=luspo"],
        ["kernels=fused", "algo.trl.top_entropy_quantile=0.2", "algo.trl.loss_type=cispo"],
        ["kernels=eager", "algo.trl.entropy_coef=0.01", "algo.trl.use_adaptive_entropy=true"],
        [
            "kernels=trl",
            "algo.trl.loss_type=vespo",
            "algo.trl.off_policy_mask_threshold=0.5",
            "algo.trl.entropy_coef=0.01",
        ],
        ["algo.trl.sync_ref_model=true", "model.lora.enabled=false"],
    ):
        load_config(overrides)


def _train(tmp_path, kernels: str, loss_type: str) -> list[dict]:
    cfg = load_config(
        [
            f"kernels={kernels}",
            f"algo.trl.loss_type={loss_type}",
            "trainer.max_steps=2",
            "trainer.per_device_batch_size=2",
            "algo.trl.num_generations=2",
            "algo.trl.max_completion_length=4",
            "trainer.progress_bar=false",
            # SGD at a large step: the second step's ratios, KL and metrics move, and stay comparable at 1e-5
            "hw.optimizer=sgd",
            "trainer.lr=0.5",
        ]
    )
    torch.manual_seed(0)
    trainer = build_trainer(cfg, tmp_path / kernels)
    trainer.train()
    return [h for h in trainer.state.log_history if "grad_norm" in h]


RATIO_METRIC = {"clip": "clip_ratio/region_mean", "cispo": "cispo_clip_ratio", "vespo": "vespo/phi_seq_mean"}


# ~3 s of CPU per run, 3 runs per type: one type in the fast suite (the one with the most of TRL in it), all in slow
@pytest.mark.parametrize(
    "loss_type", [t if t == "vespo" else pytest.param(t, marks=pytest.mark.slow) for t in LOSS_TYPES]
)
def test_every_loss_type_trains_on_trl_eager_and_fused(tmp_path, loss_type):
    """`train.py algo.trl.loss_type=L kernels=K trainer.max_steps=2` in-process for K in trl, eager, fused: two steps
    with a real update, and the kernel paths log TRL's numbers (loss, grad norm, KL, the loss type's metric)."""
    runs = {k: _train(tmp_path, k, loss_type) for k in ("trl", "eager", "fused")}
    ref = runs["trl"]
    assert [h["step"] for h in ref] == [1, 2]
    assert all(math.isfinite(h["loss"]) for h in ref) and max(h["grad_norm"] for h in ref) > 1e-3
    metric = RATIO_METRIC.get(LOSSES[loss_type].term)
    keys = ["loss", "grad_norm", "kl", *([metric] if metric else [])]
    for kernels in ("eager", "fused"):
        got = runs[kernels]
        assert [h["step"] for h in got] == [1, 2], kernels
        for a, b in zip(ref, got):
            for key in keys:
                assert b[key] == pytest.approx(a[key], rel=5e-5, abs=1e-7), (kernels, key, a["step"])
    assert ref[-1]["kl"] > 0  # the first update moved the policy away from its reference


@pytest.fixture(scope="module")
def off_policy(tmp_path_factory):
    """One batch with old log-probs and a reference, the LoRA moved since (ratios and KL away from 1 and 0)."""
    trainer = make_trainer(tmp_path_factory.mktemp("knobs"), "algo.trl.beta=0.04", "algo.trl.num_iterations=2")
    inputs = first_batch(trainer)
    perturb_lora(trainer.model, scale=0.3)
    return trainer, inputs


def _step(trainer, inputs, backend, attrs, args):
    """Loss, grads and metrics of one micro-batch on `backend` with trainer attributes / GRPOConfig fields set."""
    saved = {k: getattr(trainer, k) for k in attrs}, {k: getattr(trainer.args, k) for k in args}
    for k, v in attrs.items():
        setattr(trainer, k, v)
    for k, v in args.items():
        setattr(trainer.args, k, v)
    trainer._entropy_bonus_enabled = trainer.entropy_coef != 0.0 or trainer.use_adaptive_entropy
    trainer._metrics["train"].clear()
    try:
        trainer.kernel_backend = backend
        trainer.model.zero_grad(set_to_none=True)
        loss = trainer._compute_loss(trainer.model, dict(inputs))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        metrics = {k: float(v[-1]) for k, v in trainer._metrics["train"].items() if v}
        return loss.item(), grads, metrics, trainer.entropy_coef
    finally:
        for k, v in saved[0].items():
            setattr(trainer, k, v)
        for k, v in saved[1].items():
            setattr(trainer.args, k, v)
        trainer._entropy_bonus_enabled = trainer.entropy_coef != 0.0 or trainer.use_adaptive_entropy
        trainer._last_world_entropy, trainer._entropy_window_stats = float("inf"), None


# case: (trainer attributes of the plain loss, the knob's attributes, the knob's GRPOConfig fields)
TRAINER_KNOBS = {
    "off-policy-mask-dapo": ({"loss_type": "dapo"}, {"off_policy_mask_threshold": 0.005}, {}),
    "top-entropy-cispo": ({"loss_type": "cispo", "epsilon_high": 1.1}, {"top_entropy_quantile": 0.3}, {}),
    "delta-bnpo": ({"loss_type": "bnpo", "epsilon_high": 0.05}, {}, {"delta": 1.02}),
    "entropy-bonus-sapo": ({"loss_type": "sapo"}, {"entropy_coef": 0.05}, {}),
    # adaptive control: last window's entropy below the target, so the bonus applies and the coefficient rises
    "adaptive-entropy-vespo": (
        {"loss_type": "vespo"},
        {"use_adaptive_entropy": True, "entropy_coef": 0.1, "_last_world_entropy": 0.0},
        {"entropy_target": 100.0, "entropy_coef_delta": 0.01},
    ),
}


@pytest.mark.parametrize("case", list(TRAINER_KNOBS))
def test_knobs_in_the_trainer_equal_trls_path(off_policy, case):
    """The knobs reach the kernel path from the trainer (TRL's attributes and GRPOConfig fields) and give TRL's
    loss, gradients and metrics, with accumulation 2 (the window normaliser); the entropy controller moves the same."""
    trainer, inputs = off_policy
    base, knob, args = TRAINER_KNOBS[case]
    base = {**base, "current_gradient_accumulation_steps": 2}
    attrs = {**base, **knob}
    ref = _step(trainer, inputs, "trl", attrs, args)
    bonus = attrs.get("entropy_coef", 0.0) != 0.0
    for backend in ("eager", "chunked") if bonus else ("eager", "fused"):
        got = _step(trainer, inputs, backend, attrs, args)
        assert got[0] == pytest.approx(ref[0], rel=1e-5, abs=1e-7), backend
        assert ref[1].keys() == got[1].keys() and ref[1]
        scale = max(g.abs().max() for g in ref[1].values())  # some LoRA tensors get ~1e-4 of it: relative to all
        for n, g in ref[1].items():
            assert (g - got[1][n]).abs().max() <= 2e-5 * scale, (backend, n)
        for key in (
            "kl",
            "entropy",
            "policy_loss",
            "entropy_coef",
            "cispo_clip_ratio",
            "vespo/phi_seq_mean",
            "clip_ratio/region_mean",
            "clip_ratio/high_mean",
        ):
            if key in ref[2]:
                assert got[2][key] == pytest.approx(ref[2][key], rel=1e-5, abs=1e-7), (backend, key)
        assert got[3] == pytest.approx(ref[3], rel=1e-12), backend
    plain = _step(trainer, inputs, "trl", base, {})
    assert abs(plain[0] - ref[0]) > 1e-5, "the knob changes nothing on this batch"
    if case.startswith("adaptive"):
        assert ref[3] == pytest.approx(0.11) and ref[2]["entropy_coef"] == pytest.approx(0.11)


def test_the_command_line_kernel_is_refused_before_hydra_writes_a_run_dir(capsys):
    """`kernels=fused algo.trl.entropy_coef=0.01`: the pre-check (before Hydra makes the run dir) refuses it in one
    line, while a bare `algo.trl.entropy_coef=0.01` passes it (hw=cpu's profile then gives way to TRL's head)."""
    from posttrain.cli import _precheck

    with pytest.raises(SystemExit) as ex:
        _precheck(["kernels=fused", "algo.trl.entropy_coef=0.01"])
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: kernels=fused: the entropy bonus (entropy_coef) needs an entropy gradient, which fused lacks "
        "(eager, chunked have it)"
    ]
    _precheck(["algo.trl.entropy_coef=0.01"])
    assert capsys.readouterr().err == ""
