"""Adaptive beta: the controller's rule, and a real run in each direction."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.callbacks import read_metrics
from tests.conftest import run_cli


def test_proportional_rule_moves_toward_target_and_clips():
    c = AdaptiveBeta(beta=0.1, target=0.05)
    assert c.update(0.06) == pytest.approx(0.1 * math.exp(0.2))  # (0.06-0.05)/0.05 = 0.2
    c = AdaptiveBeta(beta=0.1, target=0.05)
    assert c.update(0.045) == pytest.approx(0.1 * math.exp(-0.1))
    c = AdaptiveBeta(beta=0.1, target=0.05)
    assert c.update(5.0) == pytest.approx(0.1 * math.exp(0.2))  # clipped at +20%
    assert c.update(float("nan")) == c.beta  # no measurement, no move


def test_horizon_rule_and_bounds():
    c = AdaptiveBeta(beta=0.1, target=0.05, horizon=10)
    assert c.update(0.0) == pytest.approx(0.1 * (1 - 0.2 / 10))  # one optimizer step per update: n_steps = 1
    assert c.update(0.06) == pytest.approx(0.1 * (1 - 0.2 / 10) * (1 + 0.2 / 10))
    c = AdaptiveBeta(beta=9.9, target=0.05, beta_max=10.0)
    assert c.update(1.0) == 10.0


def test_state_is_what_hf_checkpoints_and_rebuilds_the_controller():
    from transformers.trainer_callback import ExportableState

    c = AdaptiveBeta(beta=0.04, target=0.05, horizon=7, beta_min=1e-3, beta_max=2.0)
    c.update(0.5)
    assert isinstance(c, ExportableState)
    assert c.beta == pytest.approx(0.04 * (1 + 0.2 / 7))
    assert AdaptiveBeta.from_state(c.state()) == c  # the moved beta, target, horizon and bounds


def _betas(tmp_path, target: float) -> tuple[list[float], list[float]]:
    run = tmp_path / f"t{target}"
    proc = run_cli(
        "trainer.max_steps=5",
        "trainer.progress_bar=false",
        "algo.trl.beta=0.05",
        f"algo.kl.target={target}",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = read_metrics(run / "metrics.jsonl")
    return [r["beta"] for r in m], [r["kl"] for r in m]


def test_beta_rises_when_kl_is_above_target_and_falls_below(tmp_path):
    betas, kls = _betas(tmp_path, 1e-6)
    assert all(k > 1e-6 for k in kls[1:])  # LoRA starts at the reference (KL 0 at step 1), then departs
    assert all(b2 > b1 for b1, b2 in zip(betas[1:], betas[2:])), betas
    betas, kls = _betas(tmp_path, 100.0)
    assert all(k < 100.0 for k in kls)
    assert all(b2 < b1 for b1, b2 in zip(betas, betas[1:])), betas


def _run_recording_beta(run_dir, monkeypatch, *overrides: str) -> tuple[list[dict], dict[int, set[float]]]:
    """An in-process tiny GRPO run: its metrics.jsonl rows and, per optimizer step, the beta(s) its losses used."""
    from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer
    from tests.reliability.helpers import compose, leg, metrics

    used: dict[int, set[float]] = {}
    compute_loss = PosttrainGRPOTrainer._compute_loss

    def spy(self, model, inputs):
        used.setdefault(self.state.global_step + 1, set()).add(self.beta)
        return compute_loss(self, model, inputs)

    with monkeypatch.context() as patch:
        patch.setattr(PosttrainGRPOTrainer, "_compute_loss", spy)
        leg(compose("grpo", run_dir, *overrides))
    return metrics(run_dir), used


STEPS = 6
CADENCE = [("trl", None), ("eager", 4)]


@pytest.mark.parametrize(("kernels", "horizon"), CADENCE, ids=[f"{k}-horizon{h}" for k, h in CADENCE])
def test_beta_follows_each_optimizer_steps_kl_whatever_the_logging_window(kernels, horizon, tmp_path, monkeypatch):
    """Issue 12 items 5 and 6: beta moves after every optimizer step with that step's KL (the mean over its
    micro-batches), counts one step per update in the horizon rule, and every metrics row carries the beta the
    step's loss used. logging_steps=3 (first step logged too) must give the per-step trajectory, not one update
    per logging window."""
    if kernels != "trl":
        from posttrain.kernels import available

        ok, why = available(kernels)
        if not ok:
            pytest.skip(why)
    torch.set_num_threads(1)
    over = (
        f"kernels={kernels}",
        "algo.kl.target=0.01",
        f"algo.kl.horizon={'null' if horizon is None else horizon}",
        f"trainer.max_steps={STEPS}",
        "trainer.grad_accum=2",
    )
    every, used1 = _run_recording_beta(tmp_path / "every", monkeypatch, *over, "trainer.logging_steps=1")
    window, used3 = _run_recording_beta(tmp_path / "window", monkeypatch, *over, "trainer.logging_steps=3")

    # the recurrence applied to the logged per-step KLs (logging_steps=1: one row per step, KL = the step's mean)
    assert [r["step"] for r in every] == list(range(1, STEPS + 1))
    c = AdaptiveBeta(beta=0.04, target=0.01, horizon=horizon)
    expected = []
    for row in every:
        expected.append(c.beta)
        c.update(row["kl"])
    assert all(a != b for a, b in zip(expected, expected[1:])), expected  # beta moved at every step
    assert [r["beta"] for r in every] == pytest.approx(expected, rel=1e-12)
    assert {s: sorted(b) for s, b in used1.items()} == {
        s: [pytest.approx(b, rel=1e-12)] for s, b in zip(range(1, STEPS + 1), expected)
    }

    # logging every 3 steps (and the first): the same training, the same per-step betas, the step's own beta logged
    assert [r["step"] for r in window] == [1, 3, 6]
    assert {s: sorted(b) for s, b in used3.items()} == {
        s: [pytest.approx(b, rel=1e-12)] for s, b in zip(range(1, STEPS + 1), expected)
    }
    assert [r["beta"] for r in window] == pytest.approx([expected[0], expected[2], expected[5]], rel=1e-12)
    assert window[1]["kl"] == pytest.approx((every[1]["kl"] + every[2]["kl"]) / 2, rel=1e-9)  # same training
