"""Policy-loss kernels: per-token log-probs of completion tokens from hidden states, without (or with)
materializing `[tokens, V]` logits; GRPO's loss on them is TRL's own (`posttrain.algos.grpo.kernel_logps`).

    from posttrain.kernels import completion_logps, BACKENDS, available
    logps = completion_logps(hidden, lm_head_weight, completion_ids, completion_mask, backend="fused")

Contract
--------
- `hidden` [B, T, H]: the model's final-norm hidden states at the positions that *predict* the
  completion tokens (already shifted: `last_hidden_state[:, P-1:-1]` for prompt length P), so
  `hidden[b, t] @ lm_head_weight.T` are the logits of `completion_ids[b, t]`.
- `lm_head_weight` [V, H] = `model.lm_head.weight` (tied or not); it gets a gradient when it requires one.
- `completion_mask` [B, T] 0/1 (rows may be empty): only unmasked positions are projected; masked ones are 0.
- Temperature divides the logits. Log-softmax is always fp32 (fp64 for fp64 inputs).
- `completion_logps_entropy` adds the per-token entropy from the same pass, where a backend has one
  (`Backend.entropy_function`), with a gradient where it has that (`Backend.entropy_grad`: TRL's entropy bonus).

Backends: the table in `posttrain.kernels.registry` (`BACKENDS[name].summary`; `available(name)` says whether one
runs here and why not). Adding one: a module with the function, one `Backend(...)` row there.
"""

from __future__ import annotations

from typing import Any

from posttrain.kernels.registry import BACKENDS, CHOICES, IS_LEVELS, KL_ESTIMATORS, LOSS_TYPES, available

_LOSS = {  # name -> the module that defines it
    "completion_logps": "loss",
    "completion_logps_entropy": "loss",
    "lm_head_gathered": "loss",
}
__all__ = ["BACKENDS", "CHOICES", "IS_LEVELS", "KL_ESTIMATORS", "LOSS_TYPES", "available", *_LOSS]


def __getattr__(name: str) -> Any:  # the loss functions import torch: only when asked for (config stays light)
    if name in _LOSS:
        import importlib

        return getattr(importlib.import_module(f"posttrain.kernels.{_LOSS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
