"""End-to-end `train.py` runs (in this interpreter; tests/test_console.py runs `python train.py` as a subprocess):
the run directory, the GPT-OSS path, and the length probe."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posttrain.callbacks import read_metrics
from posttrain.config.compose import load_config
from posttrain.hardware import apply_profile
from tests.conftest import run_cli


def test_tiny_gpt_oss_grpo_three_steps_and_run_dir(tmp_path):
    run = tmp_path / "run"
    proc = run_cli("model=tiny_gpt_oss", "algo=grpo", "trainer.max_steps=3", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run header: where, what runs (the profile's choices included), how much trains
    (header,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"run {run}: ")]
    assert "algo=grpo model=tiny_gpt_oss hw=cpu" in header and "kernels=fused" in header
    assert "| params " in header and "trainable" in header and "set by the profile: " in header
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(math.isfinite(m["loss"]) and 0.0 <= m["reward"] <= 1.0 for m in metrics)
    # LoRA starts at its reference: no KL before the first update, some after it
    assert metrics[0]["kl"] == 0.0 and metrics[-1]["kl"] > 0.0
    # one config in the run dir, and it is what ran: the composition with the hw profile applied (read-only after)
    configs = [p.relative_to(run) for p in run.rglob("*config.yaml") if "checkpoints" not in p.parts]
    assert configs == [Path("config.yaml")]
    ran = load_config(["model=tiny_gpt_oss", "algo=grpo", "trainer.max_steps=3"])
    apply_profile(ran, overrides={"model", "algo", "trainer.max_steps"})
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.pop("run_dir") == str(run)
    ran = OmegaConf.to_container(ran, resolve=True)
    ran.pop("run_dir")
    assert OmegaConf.to_container(saved) == ran
    state = json.loads((run / "checkpoints" / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_step"] == 3 and summary["algo"] == "grpo"


@pytest.mark.slow
def test_length_probe_rises_until_the_cap(tmp_path):
    """The default task: reward = min(len, 12)/12 must climb from a short-completion start to the cap."""
    run = tmp_path / "run"
    proc = run_cli("trainer.max_steps=30", "trainer.progress_bar=false", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rewards = [m["reward"] for m in read_metrics(run / "metrics.jsonl")]
    assert len(rewards) == 30
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.8, first  # starts well below the cap: the probe has room to rise
    assert last > first + 0.15 and last > 0.95, (first, last)  # ...and saturates


def test_full_finetuning_with_kl_uses_the_initial_weights_as_reference(tmp_path):
    """No hub id for a tiny model: its initial weights are saved in the run dir and TRL's reference loads them."""
    run = tmp_path / "run"
    proc = run_cli(
        "model.lora.enabled=false",
        "algo.trl.beta=0.04",
        "trainer.max_steps=3",
        "trainer.lr=1e-3",
        "trainer.progress_bar=false",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    kls = [m["kl"] for m in read_metrics(run / "metrics.jsonl")]
    assert abs(kls[0]) < 1e-6 and kls[-1] > 1e-5  # policy starts at the reference, then moves away
    assert (run / "init_model" / "model.safetensors").is_file()
