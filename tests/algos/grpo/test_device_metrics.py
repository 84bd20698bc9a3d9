"""The metrics posttrain adds to TRL's (`kl_p95`, the rollout copy's mismatch) stay on the device until `log()`
(`posttrain.algos.grpo.device_metrics`), and are logged as the floats they were.

On a GPU a metric read between the forward and the backward (`.item()`, `.tolist()`, `float()`) makes the host
wait for the forward. TRL's own `_compute_loss` reads its metrics so; what posttrain adds over it must not.
"""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.grpo.device_metrics import resolve, resolve_metrics
from posttrain.algos.grpo.policy_forward import global_p95
from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora


def test_resolve_keeps_order_floats_and_nan():
    values = [1.5, torch.tensor(2.25), math.nan, torch.tensor(float("nan")), torch.tensor(-3.0, dtype=torch.bfloat16)]
    out = resolve(values)
    assert out[0] == 1.5 and out[1] == 2.25 and out[4] == -3.0
    assert math.isnan(out[2]) and math.isnan(out[3])
    assert all(type(v) is float for v in out)


def test_resolve_metrics_in_place_leaves_float_lists_alone():
    floats = [0.1, 0.2]
    metrics = {"a": floats, "b": [torch.tensor(1.0), 3.0], "c": []}
    resolve_metrics(metrics)
    assert metrics["a"] is floats and metrics["b"] == [1.0, 3.0] and metrics["c"] == []


class _OneProcess:
    num_processes = 1

    def pad_across_processes(self, x, dim):
        return x

    def gather(self, x):
        return x


@pytest.mark.parametrize("n", [7, 300])
def test_global_p95_is_torch_quantile_over_the_unmasked_values(n):
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(4, n, generator=gen)
    mask = (torch.rand(4, n, generator=gen) > 0.3).long()
    got = global_p95(_OneProcess(), x, mask)
    assert isinstance(got, torch.Tensor)
    assert float(got) == pytest.approx(float(torch.quantile(x[mask > 0], 0.95)), rel=1e-6)
    assert math.isnan(float(global_p95(_OneProcess(), x, torch.zeros_like(mask))))


@pytest.mark.parametrize("backend", ["trl", "fused"])
def test_added_metrics_stay_on_the_device_and_log_as_floats(tmp_path, backend):
    trainer = make_trainer(tmp_path, f"kernels={backend}", "algo.trl.beta=0.04")
    inputs = first_batch(trainer)
    perturb_lora(trainer.model, scale=0.3)
    trainer._metrics["train"].clear()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    metrics = trainer._metrics["train"]
    kept = {k: v[-1] for k, v in metrics.items() if v and isinstance(v[-1], torch.Tensor)}
    assert set(kept) == {"kl_p95"}  # TRL appends its own as floats
    assert all(t.dim() == 0 and not t.requires_grad for t in kept.values())
    expected = {k: float(t) for k, t in kept.items()}
    assert expected["kl_p95"] >= metrics["kl"][-1] > 0.0
    trainer.log({"loss": float(loss)})
    logged = trainer.state.log_history[-1]
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-6), key
