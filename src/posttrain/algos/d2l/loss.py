"""D2L objective: CE on the answer tokens (no document in the prompt), optional top-k KL to the in-context
teacher, optional L1 on the generated A/B, optional locality KL on another entity's question (`locality.py`).
Logits are formed only at answer positions, by the model's forward (so in the precision training runs in: bf16
weights, or bf16 autocast over fp32 ones), then upcast: log-softmax, CE and KL are fp32."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from posttrain.across_processes import token_weight
from posttrain.algos.d2l.locality import locality_kl
from posttrain.data.chat import IGNORE_INDEX, check_labels

OTHER_VIEW = ("o_input_ids", "o_attention_mask", "o_labels")


def answer_logits(
    model: Any, batch: dict[str, torch.Tensor], other_view: bool = False
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(fp32 logits at the positions predicting answer tokens [n, V], their targets [n], the model's output: the
    generated LoRA, and with `other_view` the other-entity view's logits with and without it, `locality.py`)."""
    labels = batch["labels"][:, 1:]
    check_labels(labels)
    other = {k: batch[k] for k in OTHER_VIEW} if other_view else {}
    out = model(
        batch["ctx_ids"],
        batch["ctx_mask"],
        batch["input_ids"],
        batch["attention_mask"],
        labels=batch["labels"],
        ctx_doc=batch.get("ctx_doc"),
        **other,
    )
    return out.logits, labels[labels != IGNORE_INDEX], out


def answer_token_weight(batch: dict[str, torch.Tensor]) -> float:
    """`d2l_loss`'s `token_weight` for this process's batch (1.0 on one process)."""
    return token_weight((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def topk_kl(logits: torch.Tensor, t_idx: torch.Tensor, t_logp: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over the teacher's top-k tokens (teacher renormalised on them), mean over tokens."""
    s_logp = F.log_softmax(logits / temperature, dim=-1).gather(-1, t_idx.long())
    t_logp = t_logp.float() - torch.logsumexp(t_logp.float(), dim=-1, keepdim=True)
    return (t_logp.exp() * (t_logp - s_logp)).sum(-1).mean()


def d2l_loss(
    model: Any,
    batch: dict[str, torch.Tensor],
    ce_coef: float = 1.0,
    kl_coef: float = 0.0,
    l1_coef: float = 0.0,
    kl_temperature: float = 1.0,
    locality_coef: float = 0.0,
    token_weight: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss and its terms' values. `token_weight` scales the per-token means (CE, KL): this batch's
    share of the answer tokens of all processes' batches times their number, so that the mean over processes
    (DDP, FSDP and ZeRO average gradients) is the mean over every answer token, as on one process."""
    if locality_coef > 0 and "o_input_ids" not in batch:
        raise ValueError("algo.locality_coef > 0 but the batch has no other-entity view (attach_other_entity)")
    logits, targets, out = answer_logits(model, batch, other_view=locality_coef > 0)
    ce = F.cross_entropy(logits, targets)
    l1 = out.lora.l1()
    loss = token_weight * ce_coef * ce + l1_coef * l1
    stats = {"ce_loss": float(ce.detach()), "gen_lora_l1_norm": float(l1.detach())}
    if kl_coef > 0:
        if "t_idx" not in batch:
            raise ValueError("algo.kl_coef > 0 but the batch has no teacher top-k (build the teacher cache)")
        if batch["t_idx"].shape[0] != logits.shape[0]:
            raise ValueError(f"teacher top-k has {batch['t_idx'].shape[0]} answer tokens, student {logits.shape[0]}")
        kl = topk_kl(logits, batch["t_idx"], batch["t_logp"], kl_temperature)
        loss = loss + token_weight * kl_coef * kl
        stats["kl_loss"] = float(kl.detach())
    if locality_coef > 0:
        o_labels = batch["o_labels"][:, 1:]
        keep = batch["o_keep"][:, None].expand_as(o_labels)[o_labels != IGNORE_INDEX]
        local = locality_kl(out.other, out.other_base, keep)
        loss = loss + locality_coef * local
        stats["locality_loss"] = float(local.detach())
    return loss, stats
