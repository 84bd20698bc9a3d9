"""The weighted sum of `algo=contrastive`'s loss terms on one batch of row blocks, shared by both trainers.

Blocks (each B rows, example k at row k of each): benign, counterfactual, injected, and executed when the
invariance term is on (`config.uses_executed_rows`). Terms, each with its weight:

- representation (`algo.contrastive_weight`): `invariance_nce`;
- output consistency (`algo.consistency_weight`): `consistency_kl` between the benign and injected blocks' answer
  distributions (both label the benign answer);
- LM loss (`algo.lm_weight`, `with_lm`): next-token cross-entropy over the answer tokens of the benign block, the
  injected block with `algo.lm_on_injected` (StruQ-style) and the counterfactual one with `algo.lm_on_counterfactual`.

Logits are formed once per block that a term reads, at its answer positions only, in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from posttrain.across_processes import as_global_term, gathered_blocks, token_weight
from posttrain.algos.contrastive.config import uses_executed_rows
from posttrain.algos.contrastive.loss import answer_logits, consistency_kl, invariance_nce
from posttrain.algos.contrastive.model import ContrastiveOutput
from posttrain.data.chat import check_labels

BENIGN, COUNTERFACTUAL, INJECTED = 0, 1, 2


def lm_blocks(algo: DictConfig) -> list[int]:
    """The blocks the LM loss reads."""
    return [
        BENIGN,
        *([COUNTERFACTUAL] if algo.lm_on_counterfactual else []),
        *([INJECTED] if algo.lm_on_injected else []),
    ]


def loss_terms(
    out: ContrastiveOutput,
    labels: torch.Tensor,
    lm_head: torch.nn.Module,
    algo: DictConfig,
    with_lm: bool = True,
    across_processes: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(weighted loss, per-term statistics) of the batch `out` / `labels` (rows: the blocks above).

    `across_processes` (training on several processes): the invariance term's in-batch negatives are every process's
    rows and the token means weigh each token of the global batch alike (`posttrain.across_processes`), so that the
    processes' averaged gradients are one process's on the whole batch."""
    n_blocks = 4 if uses_executed_rows(algo) else 3
    rows = out.hidden.shape[0]
    if rows % n_blocks:
        raise ValueError(f"contrastive batch has {rows} rows, not a multiple of its {n_blocks} blocks")
    b = rows // n_blocks
    total = out.z.new_zeros(())
    stats: dict[str, float] = {}
    if algo.contrastive_weight > 0:
        world = 1
        z = out.z
        if across_processes and algo.in_batch_negatives:
            z, world = gathered_blocks(out.z, n_blocks)
        rep, stats = invariance_nce(z, algo.temperature, algo.in_batch_negatives)
        total = total + algo.contrastive_weight * as_global_term(rep, world)

    lm_on = with_lm and algo.lm_weight > 0
    needed = set(lm_blocks(algo) if lm_on else []) | ({BENIGN, INJECTED} if algo.consistency_weight > 0 else set())
    logits = {}
    for i in sorted(needed):
        block = slice(i * b, (i + 1) * b)
        check_labels(labels[block], where="contrastive answer tokens")
        logits[i] = answer_logits(out.hidden[block], labels[block], lm_head)
    if lm_on:
        blocks = lm_blocks(algo)
        targets = torch.cat([logits[i][1] for i in blocks])
        lm = F.cross_entropy(torch.cat([logits[i][0] for i in blocks]), targets)
        share = token_weight(targets.numel()) if across_processes else 1.0
        total = total + algo.lm_weight * share * lm
        stats["lm_loss"] = float(lm.detach())
    if algo.consistency_weight > 0:
        (benign, benign_targets), (injected, injected_targets) = logits[BENIGN], logits[INJECTED]
        if not torch.equal(benign_targets, injected_targets):
            raise ValueError("the consistency term needs the injected rows to label the benign answer")
        kl = consistency_kl(benign, injected)
        share = token_weight(benign_targets.numel()) if across_processes else 1.0
        total = total + algo.consistency_weight * share * kl
        stats["kl"] = float(kl.detach())
    return total, stats
