"""`algo=contrastive`: LoRA + projection head trained on (benign, counterfactual, injected) triplets.

    python train.py algo=contrastive data=contrastive_injection model=tiny_llama          # train
    python train.py algo=contrastive mode=eval hydra.run.dir=<run>                       # score a run

Python API (`posttrain.algos.contrastive.api`, re-exported lazily): `build_model(cfg)` -> `ContrastiveModel`
(base + LoRA + head, its tokenizer as `.tokenizer`); `evaluate_model(cfg, model)` in `.evaluate`.
This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Algorithm, Workload
from posttrain.algos.contrastive.config import ContrastiveAlgoConfig, validate_contrastive

__all__ = ["ALGORITHM", "ContrastiveAlgoConfig", "build_model"]
VIEWS = 3  # benign, counterfactual, injected: every micro-batch runs all three in one forward


class Contrastive(Algorithm):
    name = "contrastive"
    schema = ContrastiveAlgoConfig
    console = {
        "show": {"loss": "loss", "nce": "nce", "lm_loss": "lm", "nce_acc": "nce_acc"},
        "trend": ("loss", "nce", "lm_loss", "nce_acc"),
        "plots": {"loss.png": ("loss", "nce", "lm_loss", "nce_acc")},
    }

    def validate(self, cfg: DictConfig) -> None:
        validate_contrastive(cfg)

    def workload(self, cfg: DictConfig) -> Workload:
        """Every example is a triplet: x3 sequences; the LM loss reads the benign rows, the injected ones unless
        `lm_on_injected` is false, the counterfactual with `lm_on_counterfactual`; the projection head (counted
        from the module) trains too."""
        from posttrain.algos.contrastive.model import head_parameter_count

        algo, batch = cfg.algo, int(cfg.trainer.per_device_batch_size)
        seq = int(algo.max_length)
        lm_views = (1 + bool(algo.lm_on_injected) + bool(algo.lm_on_counterfactual)) if float(algo.lm_weight) else 0
        return Workload(
            seqs=batch * VIEWS,
            seq_len=seq,
            logit_tokens=seq * lm_views // VIEWS,
            note=f"{batch} triplets x {VIEWS} views (benign, counterfactual, injection)",
            train_mode="lora",
            extra_trainable=head_parameter_count(cfg),
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.contrastive.api import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        from posttrain.algos.contrastive.api import summarize

        return summarize(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.contrastive.evaluate import evaluate_checkpoint

        return evaluate_checkpoint(cfg, checkpoint, run_dir)


ALGORITHM = Contrastive()


def __getattr__(name: str) -> Any:
    if name == "build_model":
        return importlib.import_module("posttrain.algos.contrastive.model").build_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
