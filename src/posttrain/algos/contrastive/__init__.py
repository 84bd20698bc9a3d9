"""`algo=contrastive`: LoRA + projection head trained on (benign, counterfactual, injected) triplets.

    python train.py algo=contrastive data=contrastive_injection model=tiny_llama          # train
    python train.py algo=contrastive data=contrastive_injection mode=eval hydra.run.dir=<run>   # score a run

Entry points used by `posttrain.run`: `build_trainer`, `summarize` (before/after scores into summary.json),
`evaluate` (mode=eval). Memory plans count `BATCH_MULTIPLIER` (3) rows per nominal example.

Kept import-light (names load on first use from `posttrain.algos.contrastive.api`) so composing a config, which imports
`posttrain.algos.contrastive.config`, does not pull in torch and the model code.
"""

from __future__ import annotations

import importlib
from typing import Any

# what the terminal shows (posttrain.callbacks.console): bar postfix and compact line, end table, plots/ files
CONSOLE = {
    "show": {"loss": "loss", "nce": "nce", "lm_loss": "lm", "nce_acc": "nce_acc"},
    "trend": ("loss", "nce", "lm_loss", "nce_acc"),
    "plots": {"loss.png": ("loss", "nce", "lm_loss", "nce_acc")},
}

__all__ = ['BATCH_MULTIPLIER', 'ContrastiveAlgoConfig', 'build_model', 'build_trainer', 'evaluate', 'summarize']


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("posttrain.algos.contrastive.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
