"""Shared pieces of the reliability tests: tiny per-algorithm overrides, in-process legs, checkpoint readers."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig, open_dict
from safetensors.torch import load_file
from transformers import TrainerCallback

from posttrain.callbacks import read_metrics
from posttrain.config.compose import load_config

ROOT = Path(__file__).resolve().parents[2]

# the smallest runs of each algorithm that still train every part (2-4 optimizer steps each)
TINY: dict[str, tuple[str, ...]] = {
    "grpo": (
        "algo=grpo",
        "trainer.per_device_batch_size=4",
        "algo.trl.num_generations=2",
        "data.num_train=16",
        "algo.trl.max_completion_length=6",
        "algo.trl.beta=0.04",
    ),
    "contrastive": (
        "algo=contrastive",
        "data=contrastive_injection",
        "data.num_train=16",
        "data.num_eval=0",
        "algo.head_hidden_dim=16",
        "algo.proj_dim=8",
        "trainer.per_device_batch_size=2",
        "trainer.lr=1e-2",
    ),
    "d2l": (
        "algo=d2l",
        "data=d2l_synth",
        "data.num_train=16",
        "data.num_eval=0",
        "algo.eval_at_end=false",
        "trainer.per_device_batch_size=2",
        "trainer.lr=2e-3",
    ),
}
COMMON = ("model=tiny_llama", "trainer.progress_bar=false", "trainer.save_total_limit=null")


class StopAt(TrainerCallback):
    """A preempted job: training ends after optimizer step `step` (after that step's checkpoint is saved)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


def compose(algo: str, run_dir: Path, *overrides: str) -> DictConfig:
    cfg = load_config([*COMMON, *TINY[algo], *overrides])
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


def leg(cfg: DictConfig, stop_at: int | None = None) -> dict:
    """One `python train.py` worth of training in this process (what `posttrain.run.run` does for mode=train)."""
    from posttrain.hardware import apply_profile
    from posttrain.run import train

    apply_profile(cfg)
    return train(cfg, Path(cfg.run_dir), callbacks=[StopAt(stop_at)] if stop_at else None)


def tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every safetensors file of a checkpoint, keyed `<file>:<name>`."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted(ckpt.rglob("*.safetensors")):
        out.update({f"{f.relative_to(ckpt)}:{k}": v for k, v in load_file(str(f)).items()})
    return out


def optimizer_state(ckpt: Path) -> dict:
    return torch.load(ckpt / "optimizer.pt", weights_only=True, map_location="cpu")


def metrics(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / "metrics.jsonl")


def trainer_state(ckpt: Path) -> dict:
    return json.loads((ckpt / "trainer_state.json").read_text())
