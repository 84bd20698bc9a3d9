"""The trainable hypernetwork: Perceiver aggregator over context-encoder activations -> per-(layer, module[, rank])
latents -> heads emitting LoRA A `[r, d_in]` and B `[r, d_out]`, with learned per-layer/per-rank scalers
(B's scaler starts at 0, so the generated update starts at exactly zero) and an optional learned bias LoRA.
A document read in several chunks gets one LoRA per chunk, concatenated along the rank (its update is the sum of
the chunks' updates); the bias LoRA is added once per document."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from posttrain.algos.d2l.lora import GeneratedLoRA


@dataclass
class HypernetSpec:
    """Everything that fixes the hypernet's shapes (saved as JSON next to its safetensors)."""

    hidden_size: int  # base model width (encoder activations)
    layers: list[int]  # base layers with a generated LoRA
    modules: list[str]  # module names, e.g. q_proj
    dims: dict[str, list[int]]  # module name -> [d_in, d_out]
    rank: int = 4
    alpha: float = 8.0
    per_rank_gen: bool = True
    per_layer_processing: bool = True
    bias_lora_rank: int = 0
    encoder_depth: int = 1
    num_blocks: int = 2
    latent_size: int = 64
    num_heads: int = 4
    mlp_ratio: int = 2
    paths: dict[str, str] = field(default_factory=dict)  # "<layer>.<module>" -> module path in the base

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def num_queries(self) -> int:
        return len(self.layers) * len(self.modules) * (self.rank if self.per_rank_gen else 1)


class PerceiverBlock(nn.Module):
    """Latents cross-attend to the context, then self-attend, then an MLP (pre-norm residuals)."""

    def __init__(self, size: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm_q, self.norm_kv, self.norm_s, self.norm_m = (nn.LayerNorm(size) for _ in range(4))
        self.cross = nn.MultiheadAttention(size, heads, batch_first=True)
        self.self_attn = nn.MultiheadAttention(size, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(size, mlp_ratio * size), nn.GELU(), nn.Linear(mlp_ratio * size, size))

    def forward(self, z: torch.Tensor, ctx: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        kv = self.norm_kv(ctx)
        z = z + self.cross(self.norm_q(z), kv, kv, key_padding_mask=pad, need_weights=False)[0]
        s = self.norm_s(z)
        z = z + self.self_attn(s, s, s, need_weights=False)[0]
        return z + self.mlp(self.norm_m(z))


class Hypernet(nn.Module):
    def __init__(self, spec: HypernetSpec):
        super().__init__()
        self.spec = spec
        L, M, r, size = len(spec.layers), len(spec.modules), spec.rank, spec.latent_size
        q_per_layer = M * (r if spec.per_rank_gen else 1)
        self.in_norm = nn.LayerNorm(spec.hidden_size)
        self.in_proj = nn.Linear(spec.hidden_size, size)
        self.queries = nn.Parameter(torch.randn(L, q_per_layer, size) / math.sqrt(size))
        self.blocks = nn.ModuleList(
            PerceiverBlock(size, spec.num_heads, spec.mlp_ratio) for _ in range(spec.num_blocks)
        )
        self.out_norm = nn.LayerNorm(size)
        rows = 1 if spec.per_rank_gen else r
        self.head_A, self.head_B = nn.ParameterDict(), nn.ParameterDict()
        n_heads = L if spec.per_layer_processing else 1
        for m in spec.modules:
            d_in, d_out = spec.dims[m]
            # A rows ~ unit-norm directions over d_in; B rows likewise over d_out (B is scaled by 0 at init).
            self.head_A[m] = nn.Parameter(torch.randn(n_heads, size, rows * d_in) / math.sqrt(size * d_in))
            self.head_B[m] = nn.Parameter(torch.randn(n_heads, size, rows * d_out) / math.sqrt(size * d_out))
        self.scale_A = nn.Parameter(torch.ones(L, M, r))
        self.scale_B = nn.Parameter(torch.zeros(L, M, r))  # generated update starts at exactly zero
        if spec.bias_lora_rank:
            rb = spec.bias_lora_rank
            self.bias_A = nn.ParameterDict(
                {
                    m: nn.Parameter(torch.randn(L, rb, spec.dims[m][0]) / math.sqrt(spec.dims[m][0]))
                    for m in spec.modules
                }
            )
            self.bias_B = nn.ParameterDict({m: nn.Parameter(torch.zeros(L, rb, spec.dims[m][1])) for m in spec.modules})

    def latents(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """feats `[N, depth, T, hidden]`, mask `[N, T]` -> latents `[N, L, queries per layer, size]`."""
        spec = self.spec
        N, T = feats.shape[0], feats.shape[2]
        L = len(spec.layers)
        pad = ~mask.bool()
        if spec.per_layer_processing:  # layer l's latents read layer l's activations
            ctx = feats[:, spec.layers].reshape(N * L, T, -1)
            pad = pad.repeat_interleave(L, dim=0)
            z = self.queries.unsqueeze(0).expand(N, -1, -1, -1).reshape(N * L, -1, spec.latent_size)
        else:  # every latent reads the encoder's last layer
            ctx = feats[:, -1]
            z = self.queries.reshape(1, -1, spec.latent_size).expand(N, -1, -1)
        ctx = self.in_proj(self.in_norm(ctx.to(self.in_proj.weight.dtype)))
        for block in self.blocks:
            z = block(z, ctx, pad)
        return self.out_norm(z).reshape(N, L, -1, spec.latent_size)

    def forward(self, feats: torch.Tensor, mask: torch.Tensor, doc: torch.Tensor | None = None) -> GeneratedLoRA:
        """feats/mask of C chunks; `doc[c]`: the document chunk c belongs to (chunks of a document contiguous, in
        order; None: one chunk per document) -> one LoRA per document."""
        spec = self.spec
        z = self.latents(feats, mask)
        C, L, M, r = z.shape[0], len(spec.layers), len(spec.modules), spec.rank
        z = z.reshape(C, L, M, -1, spec.latent_size)  # [C, L, M, r or 1, size]
        N, place, rows = C, None, None
        if doc is not None and (len(doc) != C or bool((doc != torch.arange(C, device=doc.device)).any())):
            counts = torch.bincount(doc)
            first = torch.cumsum(counts, 0) - counts
            N, width = len(counts), int(counts.max())
            place = (doc, torch.arange(C, device=doc.device) - first[doc], width)
            rows = counts * r + spec.bias_lora_rank
        A, B = {}, {}
        for mi, m in enumerate(spec.modules):
            d_in, d_out = spec.dims[m]
            zm = z[:, :, mi]  # [N, L, q, size]
            hA, hB = self.head_A[m], self.head_B[m]
            if not spec.per_layer_processing:
                hA, hB = hA.expand(L, -1, -1), hB.expand(L, -1, -1)
            a = torch.einsum("nlqs,lso->nlqo", zm, hA).reshape(C, L, r, d_in)
            b = torch.einsum("nlqs,lso->nlqo", zm, hB).reshape(C, L, r, d_out)
            a = a * self.scale_A[:, mi].unsqueeze(-1)
            b = b * self.scale_B[:, mi].unsqueeze(-1)
            if place is not None:
                a, b = _by_document(a, place, N), _by_document(b, place, N)
            if spec.bias_lora_rank:
                a = torch.cat([a, self.bias_A[m].unsqueeze(0).expand(N, -1, -1, -1)], dim=2)
                b = torch.cat([b, self.bias_B[m].unsqueeze(0).expand(N, -1, -1, -1)], dim=2)
            for li, layer in enumerate(spec.layers):
                path = spec.paths[f"{layer}.{m}"]
                A[path], B[path] = a[:, li], b[:, li]
        return GeneratedLoRA(A, B, rows)


def _by_document(x: torch.Tensor, place: tuple[torch.Tensor, torch.Tensor, int], n_docs: int) -> torch.Tensor:
    """Chunk LoRAs `[C, L, r, d]` -> document LoRAs `[N, L, width * r, d]`: chunk j of a document fills rank rows
    `j*r:(j+1)*r`, rows of chunks a document does not have stay zero."""
    doc, slot, width = place
    C, L, r, d = x.shape
    out = x.new_zeros(n_docs, width, L, r, d).index_put((doc, slot), x)
    return out.permute(0, 2, 1, 3, 4).reshape(n_docs, L, width * r, d)
