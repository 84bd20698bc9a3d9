"""Base LM + PEFT LoRA + a projection head over pooled hidden states, as one `nn.Module`.

The pooled state is a masked mean over `pool_mask` (`algo.pool=last`: the last prompt token alone, the state that
generates the answer) of one of transformers' `hidden_states` (`algo.layer`: 0 the embeddings, k the output of
decoder layer k, the last one, -1, after the final norm). The head is ONE module applied identically to every row of
the batch (no role input, no per-role heads), and its output is L2-normalised: two rows can only land apart in
projection space if the LM's pooled representations of them differ. With `algo.train_head=false` (the default) the
head is a fixed random projection: a trained head could also bring two states together by dropping the directions in
which they differ, lowering the invariance term without the LM changing (tests/algos/contrastive/test_invariance.py).
Keeping head and LM in one module makes HF Trainer's optimizer, gradient clipping and checkpointing cover both (see
`checkpoint.py` for what a checkpoint holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import nn


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `hidden` [N, T, D] over positions where `mask` [N, T] is 1, in fp32; all-masked rows -> zeros."""
    m = mask.to(torch.float32).unsqueeze(-1)
    total = (hidden.to(torch.float32) * m).sum(dim=1)
    count = m.sum(dim=1).clamp(min=1.0)  # an all-padding row has count 0: 0 / 1 = 0, never 0 / 0
    return total / count


class ProjectionHead(nn.Module):
    """Linear (hidden_dim=0) or Linear-GELU-Linear projection to `proj_dim`; output L2-normalised."""

    def __init__(self, in_dim: int, proj_dim: int, hidden_dim: int = 0):
        super().__init__()
        self.in_dim, self.proj_dim, self.hidden_dim = in_dim, proj_dim, hidden_dim
        if hidden_dim:
            self.net: nn.Module = nn.Sequential(
                nn.Linear(in_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, proj_dim)
            )
        else:
            self.net = nn.Linear(in_dim, proj_dim)

    def spec(self) -> dict[str, int]:
        return {"in_dim": self.in_dim, "proj_dim": self.proj_dim, "hidden_dim": self.hidden_dim}

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(pooled.to(self.net_dtype)).float(), dim=-1, eps=1e-8)

    @property
    def net_dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype


@dataclass
class ContrastiveOutput:
    hidden: torch.Tensor  # [R, T, D] last hidden states (after the final norm), R = 3B or 4B rows
    pooled: torch.Tensor  # [R, D] fp32, from the hidden state of `layer`
    z: torch.Tensor  # [R, P] fp32, unit norm


class ContrastiveModel(nn.Module):
    """`lm` is the PEFT-wrapped causal LM; `forward` runs the backbone once over all rows and pools."""

    lm: nn.Module
    head: ProjectionHead

    def __init__(self, lm: nn.Module, head: ProjectionHead, tokenizer: Any = None):
        super().__init__()
        self.lm = lm
        self.head = head
        self.tokenizer = tokenizer

    @property
    def causal_lm(self) -> nn.Module:
        return self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm

    @property
    def backbone(self) -> nn.Module:
        lm = self.causal_lm
        return getattr(lm, str(lm.base_model_prefix))

    def output_embeddings(self) -> nn.Module:
        return self.causal_lm.get_output_embeddings()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pool_mask: torch.Tensor, layer: int = -1
    ) -> ContrastiveOutput:
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_hidden_states=layer != -1
        )
        hidden = out.last_hidden_state
        pooled = masked_mean(hidden if layer == -1 else out.hidden_states[layer], pool_mask * attention_mask)
        return ContrastiveOutput(hidden=hidden, pooled=pooled, z=self.head(pooled))

    @torch.no_grad()
    def layer_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pool_mask: torch.Tensor
    ) -> torch.Tensor:
        """Pooled states of every hidden state [L + 1, R, D] (fp32; index 0 the embeddings, the last one after the
        final norm): what `algo.layer` may choose, for measuring several layers at once."""
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_hidden_states=True
        )
        return torch.stack([masked_mean(h, pool_mask * attention_mask) for h in out.hidden_states])

    # HF Trainer's activation-checkpointing hooks delegate to the LM
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None, **kwargs) -> None:
        self.causal_lm.activation_checkpointing_enable(activation_checkpointing_kwargs, **kwargs)

    def activation_checkpointing_disable(self) -> None:
        self.causal_lm.activation_checkpointing_disable()


def build_model(cfg: DictConfig, init: bool = True):
    """`ContrastiveModel`: base + LoRA + a seeded fp32 head, trainable with `algo.train_head` (tokenizer as
    `.tokenizer`); weights of `algo.init_from` if `init`."""
    from posttrain.algos.contrastive.checkpoint import load_weights
    from posttrain.models import load

    lm, tokenizer = load(cfg, with_lora=True)
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed + 1)
        head = ProjectionHead(lm.config.hidden_size, cfg.algo.proj_dim, cfg.algo.head_hidden_dim)
    head.to(next(lm.parameters()).device).requires_grad_(bool(cfg.algo.train_head))
    model = ContrastiveModel(lm, head, tokenizer)
    if init and cfg.algo.init_from:
        load_weights(model, cfg.algo.init_from, cfg)
    return model


def head_parameter_count(cfg: DictConfig) -> int:
    """Parameters of the projection head `cfg` builds (counted from the module on the meta device)."""
    with torch.device("meta"):
        head = ProjectionHead(int(cfg.model.arch.hidden_size), cfg.algo.proj_dim, cfg.algo.head_hidden_dim)
    return sum(p.numel() for p in head.parameters())
