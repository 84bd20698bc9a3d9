"""Pieces of GRPO's policy forward shared by TRL's loss path and posttrain's kernel path (`kernels != trl`).

- `add_mask_position_ids(model)`: every forward that gets an attention mask but no position ids (TRL's policy,
  old and reference log-prob passes, and the kernel path) uses `cumsum(mask) - 1`, the positions generation used
  to sample the completions. Without it a left-padded row is re-scored at positions shifted by its padding:
  RoPE makes that exact in exact arithmetic, not in bf16.
- `router_aux_loss`: the MoE load-balancing loss exactly as TRL's fused LM head computes it.
- `global_masked_mean`, `global_p95`: metrics over the tokens of every process, as TRL reduces its own metrics.

The kernel path's forward itself is `PosttrainGRPOTrainer._kernel_forward`; it runs inside the wrapped model's
forward (TRL's `_ForwardRedirection`), so DDP/FSDP/DeepSpeed see a forward of the module they wrap.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers CausalLM inside a PEFT model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _mask_position_ids(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]):
    if kwargs.get("position_ids") is not None or kwargs.get("past_key_values") is not None:
        return None
    mask = kwargs.get("attention_mask")
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or ids is None or ids.shape[:2] != mask.shape:
        return None
    # transformers' `_prepare_position_ids_for_generation`, the positions the completions were sampled at
    kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return args, kwargs


def add_mask_position_ids(model: torch.nn.Module) -> None:
    """Make the backbone of `model` (a CausalLM, PEFT-wrapped or not) derive missing position ids from the mask."""
    lm = causal_lm(model)
    backbone = getattr(lm, str(lm.base_model_prefix))
    if not getattr(backbone, "_posttrain_mask_positions", False):
        backbone.register_forward_pre_hook(_mask_position_ids, with_kwargs=True)
        backbone._posttrain_mask_positions = True


def router_aux_loss(lm: torch.nn.Module, router_logits: Any, attention_mask: torch.Tensor) -> torch.Tensor:
    """The load-balancing loss TRL's fused LM head returns as `aux_loss` (Mixtral's, which every MoE family uses)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    cfg = lm.config.get_text_config()
    loss = load_balancing_loss_func(router_logits, cfg.num_experts, cfg.num_experts_per_tok, attention_mask)
    return torch.as_tensor(loss)


def global_masked_mean(accelerator: Any, x: torch.Tensor, mask: torch.Tensor) -> float:
    """TRL's `global_masked_mean`: the mean over every process's unmasked tokens ([B, 1] values: per sequence)."""
    if x.shape[1] == 1:
        local = torch.stack([x.sum(), torch.tensor(float(x.shape[0]), device=x.device, dtype=x.dtype)])
    else:
        m = mask.to(x.dtype)
        local = torch.stack([(x * m).sum(), m.sum()])
    totals = accelerator.reduce(local, reduction="sum")
    return (totals[0] / totals[1].clamp(min=1.0)).item()


def global_p95(accelerator: Any, x: torch.Tensor, mask: torch.Tensor) -> float:
    """95th percentile (linear interpolation, as `torch.quantile`) of the unmasked values of every process."""
    x = accelerator.pad_across_processes(x.detach().float().contiguous(), dim=1)
    m = accelerator.pad_across_processes(mask.contiguous(), dim=1)
    values = accelerator.gather(x)[accelerator.gather(m) > 0]
    if values.numel() == 0:
        return math.nan
    values = values.sort().values  # torch.quantile refuses more than 2**24 values
    pos = 0.95 * (values.numel() - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, values.numel() - 1)
    return (values[lo] + (pos - lo) * (values[hi] - values[lo])).item()
