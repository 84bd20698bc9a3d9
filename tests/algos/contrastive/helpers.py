"""Small, fast settings shared by the contrastive training tests, and the plain references they check the model's
losses against (`lm_rows`, `shifted_lm_loss`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posttrain.data.chat import IGNORE_INDEX, check_labels

TINY = (
    "algo=contrastive",
    "data=contrastive_injection",
    "model=tiny_llama",
    "trainer.per_device_batch_size=2",
    "trainer.progress_bar=false",
    "trainer.lr=1e-2",
    "data.num_train=64",
    "data.num_eval=0",
    "algo.head_hidden_dim=32",
    "algo.proj_dim=16",
)


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
