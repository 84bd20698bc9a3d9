"""Generated LoRA applied per sample: a wrapper around each target linear layer that calls the wrapped layer's
own forward (so quantized subclasses such as bitsandbytes' Linear4bit keep working) and adds the sample's
low-rank update `alpha/r * (x A^T) B`.

The active LoRA is module state set by `set_lora` and cleared by `clear_lora`; it deliberately survives the end
of the forward pass, because gradient checkpointing re-runs the layer forward during backward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GeneratedLoRA:
    """Per-sample LoRA weights: `A[name]` is `[N, r, d_in]`, `B[name]` is `[N, r, d_out]` (N documents).

    Documents of several chunks have several chunks' rank rows; in a batch, documents with fewer rows are padded
    with zero rows (no update). `rows[n]`: document n's real rank rows (None: all `r`).
    """

    A: dict[str, torch.Tensor]
    B: dict[str, torch.Tensor]
    rows: torch.Tensor | None = None

    def __len__(self) -> int:
        return next(iter(self.A.values())).shape[0]

    def select(self, index: torch.Tensor | list[int]) -> GeneratedLoRA:
        rows = None if self.rows is None else self.rows[torch.as_tensor(index, device=self.rows.device)]
        return GeneratedLoRA({k: v[index] for k, v in self.A.items()}, {k: v[index] for k, v in self.B.items()}, rows)

    def detach(self) -> GeneratedLoRA:
        return GeneratedLoRA(
            {k: v.detach() for k, v in self.A.items()}, {k: v.detach() for k, v in self.B.items()}, self.rows
        )

    @staticmethod
    def cat(loras: list[GeneratedLoRA]) -> GeneratedLoRA:
        """One batch of the documents of `loras`, zero rank rows padding each to the largest rank."""
        width = max(next(iter(lo.A.values())).shape[1] for lo in loras)

        def pad(v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(v, (0, 0, 0, width - v.shape[1]))

        rows = [
            lo.rows if lo.rows is not None else torch.full((len(lo),), next(iter(lo.A.values())).shape[1])
            for lo in loras
        ]
        return GeneratedLoRA(
            {k: torch.cat([pad(lo.A[k]) for lo in loras]) for k in loras[0].A},
            {k: torch.cat([pad(lo.B[k]) for lo in loras]) for k in loras[0].B},
            torch.cat([r.to(rows[0].device) for r in rows]),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Flat dict (for safetensors): `<module>.lora_A` / `<module>.lora_B`."""
        out = {f"{k}.lora_A": v.contiguous() for k, v in self.A.items()}
        out.update({f"{k}.lora_B": v.contiguous() for k, v in self.B.items()})
        return out

    def l1(self) -> torch.Tensor:
        """Mean absolute entry over all generated A and B (padding rows excluded)."""
        mats = (*self.A.values(), *self.B.values())
        total = torch.stack([v.abs().sum() for v in mats]).sum()
        if self.rows is None:
            return total / sum(v.numel() for v in mats)
        n_rows = int(self.rows.sum())
        return total / sum(n_rows * v.shape[-1] for v in mats)


class D2LLinear(nn.Module):
    """`base_layer(x) + scaling * (x A^T) B` with A, B chosen per sample (padded rows) or per token (packed)."""

    def __init__(self, base_layer: nn.Module, scaling: float):
        super().__init__()
        self.base_layer = base_layer
        self.scaling = scaling
        self.in_features = base_layer.in_features
        self.out_features = base_layer.out_features
        self.lora_A: torch.Tensor | None = None
        self.lora_B: torch.Tensor | None = None
        self.token_index: torch.Tensor | None = None  # [batch, seq] -> LoRA index (packed sequences)

    @property
    def weight(self) -> torch.Tensor:  # some model code reads .weight (dtype/device checks)
        return self.base_layer.weight  # type: ignore[return-value]  # a Linear's weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        if self.lora_A is None:
            return y
        A, B = self.lora_A.to(x.dtype), self.lora_B.to(x.dtype)
        squeeze = x.dim() == 2
        xb = x.unsqueeze(0) if squeeze else x
        if self.token_index is not None:
            delta = self._packed(xb, A, B, self.token_index)
        else:
            if A.shape[0] == 1 and xb.shape[0] != 1:
                A, B = A.expand(xb.shape[0], -1, -1), B.expand(xb.shape[0], -1, -1)
            if A.shape[0] != xb.shape[0]:
                raise ValueError(f"{A.shape[0]} generated LoRAs for a batch of {xb.shape[0]} rows")
            delta = torch.einsum("btr,bro->bto", torch.einsum("bti,bri->btr", xb, A), B)
        delta = delta.squeeze(0) if squeeze else delta
        return y + self.scaling * delta.to(y.dtype)

    @staticmethod
    def _packed(x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Each token uses LoRA `index[b, t]`: project on all N LoRAs' A ([.., N*r]), keep its own block, then B."""
        n, r, _ = A.shape
        h = (x @ A.reshape(n * r, -1).T).view(*x.shape[:-1], n, r)
        own = torch.nn.functional.one_hot(index.clamp(min=0), n).to(h.dtype).unsqueeze(-1)  # [b, t, N, 1]
        h = (h * own).reshape(*x.shape[:-1], n * r)
        return h @ B.reshape(n * r, -1)


def find_targets(
    layers: nn.ModuleList, layer_ids: list[int], module_names: list[str]
) -> dict[str, tuple[int, str, nn.Module]]:
    """`{path: (layer, module_name, linear)}` for every target, in (layer, module) order; errors name what is
    missing."""
    found: dict[str, tuple[int, str, nn.Module]] = {}
    for li in layer_ids:
        for name in module_names:
            hits = [
                (p, m)
                for p, m in layers[li].named_modules()
                if p.split(".")[-1] == name and hasattr(m, "in_features") and hasattr(m, "out_features")
            ]
            hits = [(p, m) for p, m in hits if not p.endswith("base_layer")]
            if len(hits) != 1:
                raise ValueError(f"layer {li}: expected one linear module named {name!r}, found {[p for p, _ in hits]}")
            path, module = hits[0]
            found[f"layers.{li}.{path}"] = (li, name, module)
    return found


def install(
    layers: nn.ModuleList, targets: dict[str, tuple[int, str, nn.Module]], scaling: float
) -> dict[str, D2LLinear]:
    """Replace each target with a `D2LLinear` around it (idempotent); returns `{path: wrapper}`."""
    wrappers: dict[str, D2LLinear] = {}
    for path in targets:
        parent, attr = _parent(layers, path)
        current = getattr(parent, attr)
        if not isinstance(current, D2LLinear):
            current = D2LLinear(current, scaling)
            setattr(parent, attr, current)
        wrappers[path] = current
    return wrappers


def _parent(layers: nn.ModuleList, path: str) -> tuple[nn.Module, str]:
    """(the module holding the target `path` = "layers.<i>.<sub path>", its attribute name there)."""
    _, li, sub = path.split(".", 2)
    parent_path, _, attr = sub.rpartition(".")
    layer = layers[int(li)]
    return (layer.get_submodule(parent_path) if parent_path else layer), attr


@contextmanager
def unwrapped(layers: nn.ModuleList, wrappers: dict[str, D2LLinear]) -> Iterator[None]:
    """The wrapped base layers back in their places for the duration (for PEFT, which takes any module with a
    `base_layer` for one of its own tuner layers); the wrappers return on exit, around the same base layers."""
    for path, w in wrappers.items():
        parent, attr = _parent(layers, path)
        setattr(parent, attr, w.base_layer)
    try:
        yield
    finally:
        for path, w in wrappers.items():
            parent, attr = _parent(layers, path)
            if getattr(parent, attr) is not w.base_layer:
                raise RuntimeError(f"{path} was replaced while unwrapped (a PEFT adapter left injected?)")
            setattr(parent, attr, w)


def set_lora(
    wrappers: dict[str, D2LLinear], lora: GeneratedLoRA | None, token_index: torch.Tensor | None = None
) -> None:
    for path, w in wrappers.items():
        w.lora_A = None if lora is None else lora.A[path]
        w.lora_B = None if lora is None else lora.B[path]
        w.token_index = None if lora is None else token_index
