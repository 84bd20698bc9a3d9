"""`algo=d2l`: Doc-to-LoRA — a hypernetwork reads a document and emits LoRA weights for a frozen base model.

Entry points for `posttrain.run`: `build_trainer` (train), `summarize` (held-out eval after training),
`evaluate` (`mode=eval`). Python API: `load_d2l(cfg, checkpoint)` -> `D2LModel` with `internalize(doc) -> lora`,
`generate(prompt, lora)`, `reset()`.

Kept import-light (names load on first use from `posttrain.algos.d2l.api`) so composing a config, which imports
`posttrain.algos.d2l.config`, does not pull in torch and the model code.
"""

from __future__ import annotations

import importlib
from typing import Any

# what the terminal shows (posttrain.callbacks.console): bar postfix and compact line, end table, plots/ files
CONSOLE = {
    "show": {"loss": "loss", "ce_loss": "ce", "kl_loss": "kl", "gen_lora_l1_norm": "|lora|"},
    "trend": ("loss", "ce_loss", "kl_loss"),
    "plots": {"loss.png": ("loss", "ce_loss", "kl_loss")},
}

__all__ = ['D2LAlgoConfig', 'D2LModel', 'GeneratedLoRA', 'build_model', 'build_trainer', 'evaluate', 'load_d2l', 'summarize']


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("posttrain.algos.d2l.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
