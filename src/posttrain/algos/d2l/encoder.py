"""Context encoder: the base model's own per-layer activations over the document, from a frozen copy of its
backbone trimmed to the first `depth` layers (early exit: layers past the deepest one used never run)."""

from __future__ import annotations

import copy

import torch
from torch import nn


def backbone_of(lm: nn.Module) -> nn.Module:
    """The decoder stack (`model.model` for Llama/GPT-OSS) under a causal-LM head."""
    return getattr(lm, str(lm.base_model_prefix))


def trimmed_backbone(lm: nn.Module, depth: int, share_weights: bool = True) -> nn.Module:
    """A frozen copy of `lm`'s backbone that runs only its first `depth` layers.

    `share_weights=True` copies the module structure but shares the (frozen) tensors with the base model, so it
    costs no memory; `False` deep-copies them (e.g. to put the encoder on another device).
    """
    src = backbone_of(lm)
    enc = copy.copy(src)
    enc._modules = dict(src._modules)  # shallow copy shares the dicts: never trim the base model itself
    enc._parameters, enc._buffers = dict(src._parameters), dict(src._buffers)
    enc.layers = nn.ModuleList(list(src.layers)[:depth])  # type: ignore[arg-type]  # a ModuleList
    enc.config = copy.deepcopy(src.config)
    enc.config.num_hidden_layers = depth
    if getattr(enc.config, "layer_types", None):
        enc.config.layer_types = list(enc.config.layer_types)[:depth]  # type: ignore[arg-type]
    if not share_weights:
        enc = copy.deepcopy(enc)
    enc.requires_grad_(False)
    enc.eval()
    return enc


class ContextEncoder(nn.Module):
    """`forward(ids, mask) -> [batch, depth, seq, hidden]`: every kept layer's output over the document."""

    def __init__(self, lm: nn.Module, depth: int, share_weights: bool = True):
        super().__init__()
        backbone = trimmed_backbone(lm, depth, share_weights)
        if share_weights:
            # A plain attribute: its tensors are the base model's, which `.to()` / dtype casts reach through it.
            self.__dict__["backbone"] = backbone
        else:
            # Its own tensors: registered so that moving or casting the D2L model moves them too.
            self.backbone = backbone
        self.depth = depth

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor] = []
        hooks = [
            layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
            for layer in self.backbone.layers
        ]
        try:
            self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        return torch.stack(outputs, dim=1)
