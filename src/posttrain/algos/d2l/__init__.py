"""`algo=d2l`: Doc-to-LoRA — a hypernetwork reads a document and emits LoRA weights for a frozen base model.

    python train.py algo=d2l model=tiny_llama trainer.max_steps=300

Python API (`posttrain.algos.d2l.api`, re-exported here lazily): `load_d2l(cfg, checkpoint)` -> `D2LModel` with
`internalize(doc) -> lora`, `generate(prompt, lora)`, `reset()`; `build_model(cfg)` for a fresh one.

This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Algorithm, Workload
from posttrain.algos.d2l.config import D2LAlgoConfig, validate_d2l

__all__ = ["ALGORITHM", "D2LAlgoConfig", "D2LModel", "GeneratedLoRA", "build_model", "load_d2l"]
_API = ("D2LModel", "GeneratedLoRA", "build_model", "load_d2l")


class D2L(Algorithm):
    name = "d2l"
    schema = D2LAlgoConfig
    console = {
        "show": {"loss": "loss", "ce_loss": "ce", "kl_loss": "kl", "gen_lora_l1_norm": "|lora|"},
        "trend": ("loss", "ce_loss", "kl_loss", "gen_lora_l1_norm", "grad_norm"),
        "plots": {"loss.png": ("loss", "ce_loss", "kl_loss")},
    }

    def validate(self, cfg: DictConfig) -> None:
        validate_d2l(cfg)

    def workload(self, cfg: DictConfig) -> Workload:
        """The base stays frozen; a context encoder (a second copy of the base unless it shares the base's
        tensors) reads the documents; the hypernetwork (counted from the module itself) is what trains."""
        from posttrain.algos.d2l.model import hypernet_parameter_count

        algo, batch = cfg.algo, int(cfg.trainer.per_device_batch_size)
        doc = int(algo.encoder.max_doc_length)
        return Workload(
            seqs=batch,
            seq_len=int(algo.max_length),
            logit_tokens=int(algo.max_length),
            note=f"{batch} queries + {batch} documents (<= {algo.encoder.max_chunks} x {doc} tokens) in the encoder",
            train_mode="frozen",
            encoder_copy=not algo.encoder.share_weights,
            encoder_seqs=batch * int(algo.encoder.max_chunks),
            encoder_len=doc,  # worst case: every document chunked
            extra_trainable=hypernet_parameter_count(cfg),
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.d2l.api import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        from posttrain.algos.d2l.api import summarize

        return summarize(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.d2l.api import evaluate

        return evaluate(cfg, run_dir, checkpoint)


ALGORITHM = D2L()


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module("posttrain.algos.d2l.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
