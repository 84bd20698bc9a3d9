"""The two loss terms of `algo=contrastive`, on the 3B-row batch [benign | counterfactual | injected].

InfoNCE (bounded): anchor benign_k, positive counterfactual_k (and symmetrically), negatives injected_k — the
same request with the injection inside its data — plus, with in-batch negatives, every other example's
members. On unit vectors with temperature t the loss lies in [0, log(1 + (2B-1) e^(2/t))]: it cannot be driven
down by scaling embeddings. Because one head maps every row and normalises, a triplet whose injected
representation equals its benign one scores loss >= log 2 whatever the head's weights: only a change in the
LM's representation can push the injection away.

LM loss: next-token cross-entropy, shifted (position t predicts label t+1), on assistant tokens only, for the
benign and the injected rows (the model must answer the benign request even when the data carries an
injection; `algo.lm_on_injected=false` leaves the injected rows to the contrastive term alone, and
`algo.lm_on_counterfactual=true` adds the paraphrases); logits are formed only at labelled positions, in fp32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posttrain.data.chat import IGNORE_INDEX, check_labels


def info_nce(z: torch.Tensor, temperature: float, in_batch_negatives: bool = True) -> tuple[torch.Tensor, dict]:
    """Symmetric InfoNCE over unit vectors `z` [3B, P]; returns (loss, stats)."""
    n = z.shape[0]
    if n % 3:
        raise ValueError(f"contrastive batch has {n} rows, not a multiple of 3 (benign, counterfactual, injected)")
    b = n // 3
    zb, zc, zi = z[:b], z[b : 2 * b], z[2 * b :]
    eye = torch.eye(b, dtype=torch.bool, device=z.device)
    losses, correct = [], []
    for anchor, positive in ((zb, zc), (zc, zb)):
        pos_block = anchor @ positive.T  # diagonal: positives; off-diagonal: other examples' members
        inj_block = anchor @ zi.T  # diagonal: the own injection (hard negative)
        if not in_batch_negatives:
            pos_block = pos_block.masked_fill(~eye, float("-inf"))
            inj_block = inj_block.masked_fill(~eye, float("-inf"))
        logits = torch.cat([pos_block, inj_block], dim=1) / temperature
        target = torch.arange(b, device=z.device)
        losses.append(F.cross_entropy(logits, target))
        correct.append((logits.argmax(dim=1) == target).float().mean())
    loss = (losses[0] + losses[1]) / 2
    with torch.no_grad():
        stats = {
            "nce": float(loss),
            "nce_acc": float((correct[0] + correct[1]) / 2),
            "sim_pos": float((zb * zc).sum(-1).mean()),  # benign vs paraphrase
            "sim_inj": float((zb * zi).sum(-1).mean()),  # benign vs its injected version
        }
    return loss, stats


def info_nce_bounds(batch_size: int, temperature: float) -> tuple[float, float]:
    """(lower, upper) bound of `info_nce` for B triplets with in-batch negatives."""
    return 0.0, math.log(1 + (2 * batch_size - 1) * math.exp(2 / temperature))


def lm_rows(
    n_rows: int, with_counterfactual: bool, device: torch.device | None = None, with_injected: bool = True
) -> torch.Tensor:
    """Boolean row selector for the LM loss: the benign block, the injected block unless `with_injected` is
    false, the counterfactual block when `with_counterfactual`."""
    b = n_rows // 3
    rows = torch.ones(n_rows, dtype=torch.bool, device=device)
    if not with_counterfactual:
        rows[b : 2 * b] = False
    if not with_injected:
        rows[2 * b :] = False
    return rows


def shifted_lm_loss(hidden: torch.Tensor, labels: torch.Tensor, lm_head: torch.nn.Module) -> torch.Tensor:
    """Mean next-token CE: hidden[:, t] predicts labels[:, t + 1]; only labelled positions get logits."""
    check_labels(labels, where="contrastive LM loss")
    h = hidden[:, :-1]
    y = labels[:, 1:]
    sel = y != IGNORE_INDEX
    logits = lm_head(h[sel]).float()
    return F.cross_entropy(logits, y[sel])
