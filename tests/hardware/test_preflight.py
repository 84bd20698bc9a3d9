"""Preflight: `mode=train` plans first and refuses what cannot fit (unless hw.force), missing devices in one line."""

from __future__ import annotations

import importlib.util

import pytest

from posttrain.errors import UserError
from posttrain.hardware.preflight import preflight
from tests.conftest import run_cli


def test_refuses_when_plan_does_not_fit(compose):
    cfg = compose("model=tiny_llama", "hw=cpu", "hw.device_gib=0.05")
    with pytest.raises(UserError, match=r"memory plan: peak .* > 0.05 GiB .*hw.force=true"):
        preflight(cfg)


def test_force_trains_anyway(compose):
    cfg = compose("model=tiny_llama", "hw=cpu", "hw.device_gib=0.05", "hw.force=true")
    assert preflight(cfg)["fits"] is False


def test_fits_passes(compose):
    assert preflight(compose("model=tiny_llama", "hw=cpu"))["fits"] is True


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed")
def test_tpu_without_torch_xla_says_what_to_install(compose):
    with pytest.raises(UserError, match="pip install 'torch_xla"):
        preflight(compose("model=tiny_llama", "hw=tpu"))


def test_cuda_profile_without_cuda(compose):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(UserError, match="needs a CUDA device"):
        preflight(compose("model=tiny_llama", "hw=rtx4090"))


def test_cli_refusal_is_one_line_nonzero(tmp_path):
    proc = run_cli("hw.device_gib=0.05", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "memory plan" in errors[0] and "hw.force=true" in errors[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
