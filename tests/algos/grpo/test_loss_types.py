"""TRL 1.16's eight GRPO loss types and its loss knobs under `algo.*`: the GRPOConfig mapping (TRL's names and
defaults), the one-line refusals of what a kernel backend cannot compute, and `build_trainer(...).train()` for every
loss type with `kernels=trl`, `eager` and `fused`, the kernel paths logging TRL's own numbers."""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOConfig

from posttrain.algos.grpo.build import TRL_FIELDS, build_trainer, grpo_args
from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from posttrain.kernels.registry import LOSS_TYPES, LOSSES
from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora

# posttrain's own defaults where they differ from TRL's, on purpose (a KL term and the per-sequence mean by default)
OWN_DEFAULTS = {"loss_type": "grpo", "beta": 0.04}
# the GRPOConfig fields issue 25 names (loss types, knobs); each is an `algo` field of the same name
ISSUE_FIELDS = {
    "delta",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "off_policy_mask_threshold",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "multi_objective_aggregation",
    "sync_ref_model",
    "steps_per_generation",
    "log_completions",
}


def test_loss_types_are_trls():
    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    trl_types = {
        t for t in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo") if f"'{t}'" in help_text
    }
    assert set(LOSS_TYPES) == trl_types and len(LOSS_TYPES) == 8


def test_algo_fields_carry_trls_names_and_defaults(tmp_path):
    """Every mapped field is a GRPOConfig field whose default is TRL's (but the two posttrain picks on purpose), and
    a non-default value on the command line reaches GRPOConfig."""
    cfg = load_config([])
    fields = GRPOConfig.__dataclass_fields__
    assert ISSUE_FIELDS <= set(TRL_FIELDS) <= set(fields)
    for name in TRL_FIELDS:
        assert cfg.algo[name] == OWN_DEFAULTS.get(name, fields[name].default), name
    for name in ("min_p", "repetition_penalty"):
        assert cfg.algo.generation[name] == fields[name].default, name
    overrides = [
        "algo.loss_type=luspo",
        "algo.importance_sampling_level=sequence",
        "algo.delta=1.5",
        "algo.off_policy_mask_threshold=0.5",
        "algo.top_entropy_quantile=0.2",
        "algo.entropy_coef=0.01",
        "algo.use_adaptive_entropy=true",
        "algo.multi_objective_aggregation=normalize_then_sum",
        "algo.vllm_importance_sampling_mode=token_truncate",
        "algo.vllm_importance_sampling_clip_min=0.5",
        "algo.steps_per_generation=2",
        "algo.log_completions=true",
        "algo.generation.min_p=0.05",
        "algo.generation.repetition_penalty=1.1",
        "kernels=eager",
    ]
    args = grpo_args(load_config(overrides), tmp_path)
    for override in overrides[:-1]:
        key, value = override.split("=")
        got = getattr(args, key.split(".")[-1])
        assert str(got).lower() == value, (key, got)
    assert args.generation_batch_size == args.per_device_train_batch_size * 2  # steps_per_generation=2


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["kernels=fused", "algo.entropy_coef=0.01"], "fused lacks (eager, chunked have it)"),
        (["kernels=fused", "algo.use_adaptive_entropy=true"], "entropy gradient"),
        (["kernels=pallas", "algo.top_entropy_quantile=0.5"], "pallas does not compute"),
        (["algo.entropy_coef_min=0.5", "algo.entropy_coef_max=0.1"], "entropy_coef_min"),
        (["algo.vllm_importance_sampling_clip_min=3", "algo.vllm_importance_sampling_clip_max=2"], "clip_min=3"),
        (["algo.vllm_importance_sampling_mode=token_truncate", "algo.vllm_importance_sampling_clip_max=null"], "needs"),
        (["algo.sync_ref_model=true"], "sync_ref_model"),  # LoRA by default: TRL cannot sync its reference
        (["algo.top_entropy_quantile=1.5"], "algo.top_entropy_quantile"),
        (["algo.loss_type=ppo"], "algo.loss_type"),
        (["algo.vllm_importance_sampling_mode=seq"], "vllm_importance_sampling_mode"),
        (
            ["trainer.per_device_batch_size=4", "algo.num_generations=8", "algo.steps_per_generation=3"],
            "per_device_batch_size*algo.steps_per_generation*devices=12",
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
        (["algo.kl.estimator=k1", "algo.beta=0.01"], "fused"),  # every backend has every estimator
        (["algo.use_adaptive_entropy=true"], "trl"),  # fused has no entropy gradient: TRL's own head
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

    cfg = load_config(["kernels=trl", "algo.kl.estimator=k1", "algo.beta=0.01"])  # hw=cpu would pick fused
    apply_profile(cfg, overrides={"kernels"})
    assert cfg.kernels.backend == "trl"
    with pytest.raises(ConfigError, match=r"^kernels=fused: the entropy bonus \(entropy_coef\) needs an entropy"):
        load_config(["kernels=fused", "algo.entropy_coef=0.01"])


def test_what_can_run_composes():
    for overrides in (
        ["kernels=trl", "algo.kl.estimator=k2", "algo.beta=0.01", "algo.loss_type=luspo"],
        ["kernels=fused", "algo.top_entropy_quantile=0.2", "algo.loss_type=cispo"],
        ["kernels=eager", "algo.entropy_coef=0.01", "algo.use_adaptive_entropy=true"],
        ["kernels=trl", "algo.loss_type=vespo", "algo.off_policy_mask_threshold=0.5", "algo.entropy_coef=0.01"],
        ["algo.sync_ref_model=true", "model.lora.enabled=false"],
    ):
        load_config(overrides)


def _train(tmp_path, kernels: str, loss_type: str) -> list[dict]:
    cfg = load_config(
        [
            f"kernels={kernels}",
            f"algo.loss_type={loss_type}",
            "trainer.max_steps=2",
            "trainer.per_device_batch_size=2",
            "algo.num_generations=2",
            "algo.max_completion_length=4",
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
    """`train.py algo.loss_type=L kernels=K trainer.max_steps=2` in-process for K in trl, eager, fused: two steps
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
    trainer = make_trainer(tmp_path_factory.mktemp("knobs"), "algo.beta=0.04", "algo.num_iterations=2")
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
    """`kernels=fused algo.entropy_coef=0.01`: the pre-check (before Hydra makes the run dir) refuses it in one line,
    while a bare `algo.entropy_coef=0.01` passes it (hw=cpu's profile then gives way to TRL's head, which has it)."""
    from posttrain.cli import _precheck

    with pytest.raises(SystemExit) as ex:
        _precheck(["kernels=fused", "algo.entropy_coef=0.01"])
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: kernels=fused: the entropy bonus (entropy_coef) needs an entropy gradient, which fused lacks "
        "(eager, chunked have it)"
    ]
    _precheck(["algo.entropy_coef=0.01"])
    assert capsys.readouterr().err == ""
