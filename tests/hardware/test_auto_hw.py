"""`hw=auto`: the profile of the machine's device, resolved before validation (posttrain.config.auto_hw)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from posttrain.config.validate import ConfigError
from posttrain.hardware import apply_profile


def _no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _cuda(monkeypatch, name: str, mib: int, capability: tuple[int, int]):
    props = SimpleNamespace(name=name, total_memory=mib * 2**20, major=capability[0], minor=capability[1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


def _as_dict(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


@pytest.mark.parametrize("overrides", [(), ("+experiment=grpo_smollm2_add",), ("model=gpt_oss", "algo=d2l")])
def test_without_cuda_auto_is_exactly_cpu(compose, monkeypatch, overrides):
    _no_cuda(monkeypatch)
    auto, cpu = compose(*overrides, "hw=auto"), compose(*overrides, "hw=cpu")
    assert auto.hw.name == "cpu" and _as_dict(auto) == _as_dict(cpu)
    assert apply_profile(auto, overrides=set()) == apply_profile(cpu, overrides=set())
    assert _as_dict(auto) == _as_dict(cpu)


def test_make_train_preset_uses_auto(compose, monkeypatch):
    from posttrain.paths import CONF_DIR

    assert "override /hw: auto" in (CONF_DIR / "experiment" / "grpo_smollm2_add.yaml").read_text()
    _no_cuda(monkeypatch)
    assert compose("+experiment=grpo_smollm2_add").hw.name == "cpu"


@pytest.mark.parametrize(
    ("device", "mib", "capability", "profile", "gib", "extra"),
    [  # total memory as torch reports it, in MiB
        ("NVIDIA H100 80GB HBM3", 81559, (9, 0), "h200", 79.64, ()),
        ("NVIDIA H200", 143771, (9, 0), "h200", 140.4, ()),
        ("NVIDIA A100-SXM4-80GB", 81920, (8, 0), "a100", 80.0, ()),
        ("NVIDIA A100-PCIE-40GB", 40960, (8, 0), "a100_40gb", 40.0, ()),
        ("NVIDIA GeForce RTX 4090", 24564, (8, 9), "rtx4090", 23.98, ()),
        ("NVIDIA L40S", 46068, (8, 9), "a100_40gb", 44.98, ()),  # unknown: the profile nearest its memory
        ("NVIDIA B200", 183359, (10, 0), "a100", 179.06, ()),
        ("Tesla V100-SXM2-16GB", 16160, (7, 0), "rtx4090", 15.78, ("hw.precision=fp32", "hw.tf32=false")),  # no bf16
    ],
)
def test_cuda_device_picks_its_profile_with_measured_memory(
    compose, monkeypatch, device, mib, capability, profile, gib, extra
):
    _cuda(monkeypatch, device, mib, capability)
    auto = compose("model=llama3_2_1b", "hw=auto")
    expected = compose("model=llama3_2_1b", f"hw={profile}", f"hw.device_gib={gib}", *extra)
    assert auto.hw.name == profile and auto.hw.device_gib == gib
    assert _as_dict(auto) == _as_dict(expected)


def test_command_line_keys_win_over_the_chosen_profile(compose, monkeypatch):
    _cuda(monkeypatch, "NVIDIA H100 80GB HBM3", 81559, (9, 0))
    cfg = compose("hw=auto", "hw.device_gib=70", "hw.per_device_batch_size=4", "hw.force=true")
    assert (cfg.hw.name, cfg.hw.device_gib, cfg.hw.per_device_batch_size, cfg.hw.force) == ("h200", 70, 4, True)
    assert cfg.hw.accelerate_config == "fsdp2" and cfg.hw.optimizer == "adamw_torch_fused"  # the rest is h200's


def test_bad_values_are_one_line_errors(compose, monkeypatch):
    _no_cuda(monkeypatch)
    with pytest.raises(ConfigError) as err:
        compose("hw=atuo")
    assert "\n" not in str(err.value) and "auto" in str(err.value) and "hw/atuo" in str(err.value)
    with pytest.raises(ConfigError) as err:
        compose("hw=auto", "hw.device_gib=lots")
    assert "\n" not in str(err.value) and str(err.value).startswith("hw.device_gib")
    with pytest.raises(ConfigError, match=r"^hw.device_gib=-1.0 must be > 0$"):
        compose("hw=auto", "hw.device_gib=-1")


def test_run_resolves_auto_before_validation_and_writes_the_profile(monkeypatch, tmp_path, capsys):
    """Under @hydra.main `run(cfg)` receives the placeholder; config.yaml holds the profile it resolved to."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from posttrain.config.registry import register
    from posttrain.paths import CONF_DIR
    from posttrain.run import run
    from tests.reliability.helpers import TINY

    _no_cuda(monkeypatch)
    register()
    overrides = ["hw=auto", "model=tiny_llama", *TINY["grpo"], "trainer.max_steps=1", "trainer.save_steps=0"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=[*overrides, "trainer.progress_bar=false"])
    assert cfg.hw.name == "auto" and OmegaConf.is_missing(cfg.hw, "device")
    with open_dict(cfg):
        cfg.run_dir = str(tmp_path)
    run(cfg)
    assert "hw=auto: no CUDA device -> hw=cpu" in capsys.readouterr().out
    written = OmegaConf.load(tmp_path / "config.yaml")
    assert written.hw.name == "cpu" and written.hw.device == "cpu" and written.kernels.backend == "fused"
