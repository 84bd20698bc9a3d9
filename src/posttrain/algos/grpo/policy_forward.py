"""Pieces of GRPO's policy forward shared by TRL's loss path and posttrain's kernel path (`kernels != trl`).

- `add_mask_position_ids(model)`: every forward that gets an attention mask but no position ids (TRL's policy,
  old and reference log-prob passes, and the kernel path) uses `cumsum(mask) - 1`, the positions generation used
  to sample the completions. Without it a left-padded row is re-scored at positions shifted by its padding:
  RoPE makes that exact in exact arithmetic, not in bf16.
- `take_over_fp32_head` / `fp32_fused_head`: fp32 log-probs on TRL's loss path
  (`cast_lm_head_to_fp32`) for a PEFT model whose LM head is tied to its embeddings (SmolLM2, Llama 3.2), where
  TRL's own cast fails at init (trl 1.16 reaches for `model.model.embed_tokens` on the PeftModel).
- `router_aux_loss`: the MoE load-balancing loss exactly as TRL's fused LM head computes it.
- `global_masked_mean`, `global_p95`: metrics over the tokens of every process, as TRL reduces its own metrics,
  returned as 0-dim device tensors (`device_metrics`); `mean_over_processes`: one step's KL for adaptive beta.

The kernel path's forward itself is `PosttrainGRPOTrainer._kernel_forward`; it runs inside the wrapped model's
forward (TRL's `_ForwardRedirection`), so DDP/FSDP/DeepSpeed see a forward of the module they wrap.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posttrain.algos.grpo.device_metrics import resolve
from posttrain.models.shared_prompt import mask_positions


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers CausalLM inside a PEFT model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def take_over_fp32_head(grpo_args: Any, policy: Any) -> bool:
    """True (and TRL's `cast_lm_head_to_fp32` turned off for its init) when `policy` is a PEFT model whose LM head
    shares its weight with the input embeddings and the config asks for the cast: TRL's cast fails on that model,
    so the trainer applies it after init with `fp32_fused_head`."""
    if not isinstance(policy, torch.nn.Module) or not getattr(grpo_args, "cast_lm_head_to_fp32", False):
        return False
    lm = causal_lm(policy)
    if lm is policy or not getattr(lm.config.get_text_config(), "tie_word_embeddings", False):
        return False
    grpo_args.cast_lm_head_to_fp32 = False
    return True


def fp32_fused_head(model: Any, temperature: float, grpo_args: Any) -> None:
    """Re-add TRL's fused LM head (`add_fused_lm_head`, which TRL's init added in the model dtype) with its
    `cast_lm_head_to_fp32`: the head projection and log-softmax in fp32 outside autocast. The head's weights stay in
    the model dtype (frozen under LoRA, so no update is lost)."""
    from trl.trainer.utils import add_fused_lm_head

    lm: Any = causal_lm(model)
    lm.__dict__.pop("forward", None)  # TRL's bf16 fused head: back to the class's forward before re-adding it
    add_fused_lm_head(lm, temperature=temperature, cast_lm_head_to_fp32=True, outputs=("log_probs", "entropy"))
    grpo_args.cast_lm_head_to_fp32 = True


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
    kwargs["position_ids"] = mask_positions(mask)
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


def global_masked_mean(accelerator: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TRL's `global_masked_mean`: the mean over every process's unmasked tokens ([B, 1] values: per sequence),
    detached, on `x`'s device."""
    x = x.detach()
    if x.shape[1] == 1:
        local = torch.stack([x.sum(), torch.tensor(float(x.shape[0]), device=x.device, dtype=x.dtype)])
    else:
        m = mask.to(x.dtype)
        local = torch.stack([(x * m).sum(), m.sum()])
    totals = accelerator.reduce(local, reduction="sum")
    return totals[0] / totals[1].clamp(min=1.0)


def mean_over_processes(accelerator: Any, values: list[float | torch.Tensor]) -> float:
    """The mean of every process's mean of its non-NaN `values` (NaN where no process has one)."""
    valid = [v for v in resolve(values) if not math.isnan(v)]
    mean = sum(valid) / len(valid) if valid else math.nan
    if accelerator.num_processes == 1:
        return mean
    local = torch.tensor([mean if valid else 0.0, float(bool(valid))], dtype=torch.float64, device=accelerator.device)
    total, count = accelerator.reduce(local, reduction="sum").tolist()
    return total / count if count else math.nan


def global_p95(accelerator: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """95th percentile (linear interpolation, as `torch.quantile`) of the unmasked values of every process (NaN
    where there are none), as a 0-dim tensor on `x`'s device: masked values become NaN instead of being dropped by
    boolean indexing, which would wait for the device to know the count."""
    x = accelerator.pad_across_processes(x.detach().float().contiguous(), dim=1)
    m = accelerator.pad_across_processes(mask.contiguous(), dim=1)
    values = torch.where(accelerator.gather(m) > 0, accelerator.gather(x), math.nan).flatten()
    if values.numel() <= 2**24:  # torch's quantile limit
        return torch.nanquantile(values, 0.95)
    values = values.sort().values  # NaNs sort last
    count = (~values.isnan()).sum()
    pos = 0.95 * (count - 1).clamp(min=0).double()
    lo = pos.floor().long()
    hi = torch.minimum(lo + 1, (count - 1).clamp(min=0))
    p95 = values[lo] + (pos - lo).float() * (values[hi] - values[lo])
    return torch.where(count > 0, p95, math.nan)
