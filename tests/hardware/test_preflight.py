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


def test_a_disk_without_room_for_the_checkpoints_the_run_keeps_is_one_line(compose, tmp_path, monkeypatch):
    """SmolLM2's all-linear LoRA keeps one checkpoint of adapters + Adam states (~56 MiB); 4 saves with
    save_total_limit=2 keep 3 at once (the new one before the oldest goes)."""
    import shutil
    from collections import namedtuple

    from posttrain.hardware import apply_profile
    from posttrain.hardware.memory import plan
    from posttrain.hardware.preflight import check_disk, checkpoint_bytes

    cfg = compose("+experiment=grpo_smollm2_add", "trainer.max_steps=4", "trainer.save_steps=1", run_dir=tmp_path)
    apply_profile(cfg, overrides=set())
    result = plan(cfg)
    count, each = checkpoint_bytes(cfg, result)
    adapters = result.counts.trainable_bytes
    assert count == 3 and each == pytest.approx(3 * adapters, rel=0.01)  # fp32 adapters + two fp32 Adam moments
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(2**40, 0, int(count * each) + 1))
    check_disk(cfg, result)  # just enough
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(2**40, 0, int(each)))
    with pytest.raises(UserError, match=r"has 0\.\d\d GiB free; this run keeps 3 checkpoints of 0\.05 GiB") as err:
        check_disk(cfg, result)
    assert "\n" not in str(err.value)
