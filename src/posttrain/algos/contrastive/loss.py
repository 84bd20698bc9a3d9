"""The loss terms of `algo=contrastive`, on the batch [benign | counterfactual | injected (| executed)].

Invariance (`algo.contrastive_weight`, `invariance_nce`; rows [benign | counterfactual | injected | executed]):
anchor injected_k (task R over data D carrying injection I); positives benign_k (R over D, gradient stopped) and
counterfactual_k (a paraphrase of R over D); hard negative executed_k (I given as the trusted request over D,
gradient stopped), and with in-batch negatives every other example's benign, counterfactual and executed rows.
The injected prompt is pulled to where its benign version already is, and away from what executing the injection
looks like; benign and executed states are targets, never moved by this term. Bounded: each of the two positive
terms is a cross-entropy over one positive and the negatives, in [0, log(1 + N e^(2/t))] (`invariance_bounds`).

Output consistency (`consistency_kl`): KL(p_benign || p_injected) per answer token, p_benign the benign prompt's
next-token distribution (gradient stopped) and p_injected the injected prompt's, at the same answer tokens.


LM loss (the StruQ-style supervised term when it reads the injected rows): next-token cross-entropy, shifted
(position t predicts label t+1), on assistant tokens only, for the benign and the injected rows (the model must
answer the benign request even when the data carries an injection; `algo.lm_on_injected=false` leaves the injected
rows to the contrastive term alone, and `algo.lm_on_counterfactual=true` adds the paraphrases); logits are formed
only at labelled positions, in fp32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posttrain.data.chat import IGNORE_INDEX


def invariance_nce(z: torch.Tensor, temperature: float, in_batch_negatives: bool = True) -> tuple[torch.Tensor, dict]:
    """Invariance InfoNCE over unit vectors `z` [4B, P] = [benign | counterfactual | injected | executed]; returns
    (loss, stats). For each injected anchor and each of its two positives, a cross-entropy over [that positive,
    the negatives]; benign and executed rows are detached (targets)."""
    n = z.shape[0]
    if n % 4:
        raise ValueError(
            f"invariance batch has {n} rows, not a multiple of 4 (benign, counterfactual, injected, executed)"
        )
    b = n // 4
    zb, zc, zi, ze = z[:b].detach(), z[b : 2 * b], z[2 * b : 3 * b], z[3 * b :].detach()
    candidates = torch.cat([zb, zc, ze])  # [3B, P]: column k benign_k, B + k counterfactual_k, 2B + k executed_k
    sims = zi @ candidates.T / temperature  # [B, 3B]
    k = torch.arange(b, device=z.device)
    own = torch.zeros_like(sims, dtype=torch.bool)
    own[k, k] = own[k, b + k] = True  # the two positives
    negatives = ~own if in_batch_negatives else torch.zeros_like(own)
    negatives[k, 2 * b + k] = True  # the own injection executed: the hard negative, always
    neg = sims.masked_fill(~negatives, float("-inf"))
    losses = []
    for col in (k, b + k):  # benign, counterfactual
        logits = torch.cat([sims[k, col].unsqueeze(1), neg], dim=1)
        losses.append(torch.logsumexp(logits, dim=1) - logits[:, 0])
    loss = (losses[0] + losses[1]).mean() / 2
    with torch.no_grad():
        stats = {
            "inv": float(loss),
            "inv_acc": float((sims[k, k] > neg.max(dim=1).values).float().mean()),  # benign beats every negative
            "sim_inj_benign": float((zi * zb).sum(-1).mean()),
            "sim_inj_cf": float((zi * zc).sum(-1).mean()),
            "sim_inj_exec": float((zi * ze).sum(-1).mean()),
        }
    return loss, stats


def invariance_bounds(batch_size: int, temperature: float, in_batch_negatives: bool = True) -> tuple[float, float]:
    """(lower, upper) bound of `invariance_nce` for B examples: N = 3B - 2 negatives in-batch, else 1."""
    negatives = 3 * batch_size - 2 if in_batch_negatives else 1
    return 0.0, math.log(1 + negatives * math.exp(2 / temperature))


def consistency_kl(benign_logits: torch.Tensor, injected_logits: torch.Tensor) -> torch.Tensor:
    """Mean over answer tokens of KL(p_benign || p_injected); `*_logits` [N, V] at the same N answer tokens, the
    benign ones detached (the target distribution), computed in fp32."""
    if benign_logits.shape != injected_logits.shape:
        raise ValueError(
            f"benign and injected answer logits differ in shape ({tuple(benign_logits.shape)} vs "
            f"{tuple(injected_logits.shape)}): the two rows must label the same answer tokens"
        )
    target = F.log_softmax(benign_logits.detach().float(), dim=-1)
    return F.kl_div(F.log_softmax(injected_logits.float(), dim=-1), target, log_target=True, reduction="batchmean")


def answer_logits(hidden: torch.Tensor, labels: torch.Tensor, lm_head: torch.nn.Module) -> tuple[torch.Tensor, ...]:
    """(fp32 logits [N, V], targets [N]) at the answer positions: hidden[:, t] predicts labels[:, t + 1]; row by
    row, so two rows labelling the same answer give aligned tokens."""
    sel = labels[:, 1:] != IGNORE_INDEX
    return lm_head(hidden[:, :-1][sel]).float(), labels[:, 1:][sel]
