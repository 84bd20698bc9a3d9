"""The rollout copy's log-probs against the learner's: measured every step (zero for a copy in the policy's dtype,
not for a bf16 copy of an fp32 policy), and with `algo.sampler_correction` importance-sampled as TRL does for vLLM,
the same loss on TRL's path and the kernel path."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.grpo.build import build_trainer
from posttrain.algos.grpo.sampler_mismatch import sampling_importance_ratio
from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from tests.algos.grpo.helpers import first_batch

SMALL = [
    "model=tiny_llama",
    "trainer.progress_bar=false",
    "trainer.per_device_batch_size=8",
    "algo.trl.num_generations=4",
    "algo.trl.max_completion_length=6",
    "trainer.max_steps=1",
]


def _trainer(tmp_path, *overrides):
    cfg = load_config([*SMALL, *overrides, f"+run_dir={tmp_path}"])
    torch.manual_seed(0)
    trainer = build_trainer(cfg, tmp_path, [])
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _loss_metrics(trainer, inputs):
    trainer._metrics["train"].clear()
    loss = trainer._compute_loss(trainer.model, inputs)
    return loss, {k: float(v[-1]) for k, v in trainer._metrics["train"].items() if k.startswith("sampling/")}


@pytest.mark.parametrize(("backend", "kernels"), [("static", "trl"), ("bf16_copy", "fused"), ("bf16_copy", "trl")])
def test_mismatch_is_logged_and_zero_only_for_an_exact_copy(tmp_path, backend, kernels):
    trainer = _trainer(tmp_path, f"algo.generation.backend={backend}", f"kernels={kernels}")
    inputs = first_batch(trainer)
    assert "sampling_per_token_logps" in inputs and "importance_sampling_ratio" not in inputs
    _, m = _loss_metrics(trainer, inputs)
    assert set(m) == {
        "sampling/sampling_logp_difference/mean",
        "sampling/sampling_logp_difference/max",
        "sampling/importance_sampling_ratio/mean",
        "sampling/importance_sampling_ratio/max",
        "sampling/sampler_kl",
    }
    if backend == "static":  # the fp32 copy of an fp32 policy: the same numbers up to rounding
        assert m["sampling/sampling_logp_difference/max"] < 1e-4
        assert m["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-4)
    else:  # a bf16 copy of the fp32 policy samples from a slightly different distribution
        assert 1e-4 < m["sampling/sampling_logp_difference/mean"] < 0.5
        assert m["sampling/sampling_logp_difference/max"] >= m["sampling/sampling_logp_difference/mean"]
        assert m["sampling/importance_sampling_ratio/max"] > 1.0


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_correction_is_the_same_on_trls_path_and_the_kernel_path(tmp_path, mode):
    common = ["algo.generation.backend=bf16_copy", "algo.sampler_correction=true"]
    common += [f"algo.trl.vllm_importance_sampling_mode={mode}", "algo.trl.vllm_importance_sampling_clip_max=1.001"]
    trl = _trainer(tmp_path / "trl", *common, "kernels=trl")
    inputs = first_batch(trl)
    ratio = inputs["importance_sampling_ratio"]
    expected = sampling_importance_ratio(
        inputs["old_per_token_logps"], inputs["sampling_per_token_logps"], inputs["completion_mask"], mode, None, 1.001
    )
    torch.testing.assert_close(ratio, expected)
    assert ratio.shape[1] == (1 if mode.startswith("sequence") else inputs["completion_mask"].shape[1])
    assert (ratio != 1).any()  # the bounds bite: the correction changes the loss
    eager = _trainer(tmp_path / "eager", *common, "kernels=eager")
    eager.model.load_state_dict(trl.model.state_dict())
    loss_trl, _ = _loss_metrics(trl, inputs)
    loss_eager, _ = _loss_metrics(eager, inputs)
    torch.testing.assert_close(loss_eager, loss_trl, rtol=1e-5, atol=1e-7)
    uncorrected = {k: v for k, v in inputs.items() if k != "importance_sampling_ratio"}
    loss_plain, _ = _loss_metrics(eager, uncorrected)
    assert not torch.allclose(loss_plain, loss_eager)


def test_correction_needs_a_rollout_copy():
    with pytest.raises(ConfigError, match="sampler_correction=true corrects a posttrain rollout engine"):
        load_config([*SMALL, "algo.sampler_correction=true"])
