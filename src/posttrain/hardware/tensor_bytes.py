"""Bytes of the tensors a decoder forms, per token: what each layer keeps for its backward, its backward's and a
no-grad forward's transients, the LM head's working set per loss backend, a KV cache; and the architecture
figures and element sizes they are computed from. `posttrain.hardware.memory` sums them into a plan.

Each term is counted tensor by tensor as transformers' Llama/GPT-OSS layers and PEFT's LoRA form them; checked
against live tensor bytes of CPU steps (tests/hardware/test_plan_vs_measured.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from posttrain.models import torch_dtype

TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK = 4096, 32768  # trl.kernels.chunked_logprob: [4096 tokens, 32768 vocab] tiles
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def arch(cfg: DictConfig) -> dict[str, Any]:
    from posttrain.models import hf_config

    c = hf_config(cfg.model)
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    experts = getattr(c, "num_local_experts", None) or 0
    return {
        "h": c.hidden_size,
        "I": c.intermediate_size,
        "L": c.num_hidden_layers,
        "V": c.vocab_size,
        "heads": heads,
        "hd": head_dim,
        "hq": heads * head_dim,
        "kv": c.num_key_value_heads * head_dim,
        "experts": experts,
        "k": getattr(c, "num_experts_per_tok", 1) or 1,
        "window": getattr(c, "sliding_window", None),
        "layer_types": list(getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers),
        "tied": bool(getattr(c, "tie_word_embeddings", False)),
    }


@dataclass(frozen=True)
class Dtypes:
    """Bytes per element: `act` what matmuls produce (the autocast dtype, else the weights'), `res` the residual
    stream and norms' outputs (the weights' dtype: fp32 master weights under bf16 autocast keep it fp32)."""

    act: int
    res: int

    @property
    def autocast(self) -> bool:
        return self.act < self.res or self.act < 4


def dtypes(cfg: DictConfig) -> Dtypes:
    wbytes = torch_dtype(cfg.model, cfg.hw).itemsize
    act = 2 if cfg.hw.precision in ("bf16", "fp16") else wbytes
    return Dtypes(act=act, res=wbytes)


def act_bytes(cfg: DictConfig) -> int:
    """Bytes per activation element of the forward (for algorithms counting their own tensors)."""
    return dtypes(cfg).act


def _saved_inputs(d: Dtypes, d_in: int, consumers: int, copies: bool) -> float:
    """A linear input kept for a weight or adapter gradient: one shared tensor, or one autocast copy per consumer."""
    return d.act * d_in * (consumers if copies else 1) if consumers else 0.0


def layer_saved_per_token(
    a: dict[str, Any], d: Dtypes, attn: str, seq_len: int, adapted: frozenset[str] | None, rank: int
) -> float:
    """Bytes one decoder layer keeps for its backward, per token, the layer's input included (RMSNorm keeps its
    fp32 input: the input itself when that is fp32). `adapted`: modules with a trained adapter (LoRA, generated
    LoRA) on a frozen base; None: every weight trains (full fine-tuning)."""
    h, hq, inter, heads = a["h"], a["hq"], a["I"], a["heads"]
    full = adapted is None
    targets = frozenset(LINEARS) if full else adapted
    norms = 2 * (4 * h + 4 + (d.res * h if full else 0))  # fp32 input (+ the normalised copy for the weight's grad)
    # inputs kept for gradients: full fine-tuning shares one tensor per input unless autocast casts fp32 weights'
    # inputs per linear; fp32 LoRA adapters under autocast cast theirs per adapter
    copies = (d.autocast and d.res == 4) if full else d.autocast
    qkv = sum(m in targets for m in ("q_proj", "k_proj", "v_proj"))
    lin = _saved_inputs(d, h, qkv, copies)
    # o_proj's input is a view of SDPA's output (kept by SDPA) unless cast; eager's is a contiguous copy
    if "o_proj" in targets and (copies or attn == "eager"):
        lin += d.act * hq
    lin += 0 if full else d.act * rank * len(targets & frozenset(LINEARS))  # x A^T, kept for B's gradient
    kv_rep = hq  # a padding mask makes SDPA's math/efficient path repeat k and v to every query head
    if attn == "eager":  # q, k, v (repeated), fp32 softmax and its cast copy [heads, seq] per token
        att = d.act * 3 * hq + heads * seq_len * (4 + d.act)
    else:  # q, k, v, output, log-sum-exp, and the float mask SDPA builds from the boolean one
        att = d.act * (2 * hq + 2 * kv_rep) + 4 * heads + d.act * seq_len
    if a["experts"]:  # each routed token: gathered input, gate_up, clamp/glu pieces, down input, output
        mlp = a["k"] * d.act * (7 * inter + 2 * h) + (4 * h if d.act < 4 else 0) + 8 * a["experts"]
    else:  # gate, up, silu(gate); trained weights add silu*up and the input
        ups = sum(m in targets for m in ("gate_proj", "up_proj"))
        mlp = (
            d.act * 3 * inter
            + _saved_inputs(d, h, ups, copies)
            + _saved_inputs(d, inter, int("down_proj" in targets), copies)
        )
    return norms + lin + att + mlp


def layer_backward_per_token(a: dict[str, Any], d: Dtypes, attn: str, seq_len: int) -> float:
    """Gradients alive inside one layer's backward beyond what it kept: the MLP's three [tokens, I] gradients and
    the hidden-sized one, or eager attention's [heads, seq] probability gradients, whichever is larger."""
    mlp = 3 * d.act * a["I"] * a["k"] + d.act * a["h"]
    att = a["heads"] * seq_len * (8 + d.act) + 3 * d.act * a["hq"] if attn == "eager" else 0
    return max(mlp, att)


def outside_layers_per_token(a: dict[str, Any], d: Dtypes, full: bool, seq_len: int) -> float:
    """Final norm, rotary cos/sin (fp32), the boolean mask [seq] per token."""
    return 4 * a["h"] + 4 + (d.res * a["h"] if full else 0) + 8 * a["hd"] + seq_len


def head_bytes(
    backend: str,
    a: dict[str, Any],
    d: Dtypes,
    rows: int,
    logit_tokens: float,
    seq_len: int,
    device: str,
    compute_fp32: bool,
    weight_fp32: bool,
) -> tuple[float, float, str]:
    """(backward working set, no-grad forward working set, note) of the loss's LM-head projection."""
    vocab, h = a["V"], a["h"]
    if logit_tokens == 0:
        return 0.0, 0.0, "no LM loss"
    if backend in ("trl", "chunked"):
        # TRL 1.16's fused head (ChunkedLogProbFunction): one [4096, 32768] buffer in the compute dtype, tiles of it
        # projected with cuBLAS. With Triton (CUDA) only the completion tokens are scored and the tile is folded in
        # place; without (CPU) TRL scores every position and the torch-op fold makes ~7 fp32 tile-sized temporaries
        # in the backward, 3 in the forward. The head's input is upcast whole ([rows, seq-1, H] fp32) when it
        # computes in fp32, and the fp32 input gradient is accumulated; a bf16 weight is upcast tile by tile.
        triton = device == "cuda"
        n = rows * logit_tokens if triton or backend == "chunked" else rows * (seq_len - 1)
        cb = 4 if compute_fp32 else d.act
        rows_tile = min(n, TRL_TOKEN_CHUNK)
        buf = rows_tile * TRL_VOCAB_CHUNK * cb
        tile = rows_tile * min(vocab, TRL_VOCAB_CHUNK) * 4
        fwd_temps, bwd_temps = (0.0, 0.0) if triton else (3 * tile, 7.25 * tile)
        # a bf16 weight upcast one vocabulary chunk at a time; the backward's loop holds the next chunk's copy
        # before it lets go of the last one
        upcast_w = min(vocab, TRL_VOCAB_CHUNK) * h * cb if compute_fp32 and not weight_fp32 else 0
        hidden = rows * (seq_len - 1) * h * 4 if compute_fp32 else n * h * d.act
        bwd = buf + bwd_temps + 2 * upcast_w + hidden + n * h * 4
        fwd = buf + fwd_temps + upcast_w + hidden
        where = "completion tokens, Triton fold" if triton else "every position, torch-op fold"
        return bwd, fwd, f"{n} tokens ({where}) in [{rows_tile}, {TRL_VOCAB_CHUNK}] tiles ({backend})"
    n = rows * logit_tokens
    if backend == "eager":  # posttrain.kernels.eager: fp32 [n, V] logits, log-softmax, gradient
        return (
            n * vocab * (12 + (d.act if d.act < 4 else 0)),
            n * vocab * (8 + d.act),
            f"[{n:g} tokens, {vocab}] (eager)",
        )
    if backend == "materialized":
        # the head's [n, V] logits upcast to fp32, cross-entropy's fp32 log-softmax kept; in the backward the loss's
        # gradient and the log-softmax's beside it (measured on CPU: three fp32 [n, V] at the peak)
        return n * vocab * 12, n * vocab * (8 + d.act), f"[{n:g} answer tokens, {vocab}] fp32 logits"
    return n * h * 8 + 256 * 2048 * 4 * 2, n * h * 4, f"no [tokens, V] tensor ({backend})"


def kv_cache_bytes(a: dict[str, Any], elem: int, seqs: int, seq_len: int, full_length: bool = False) -> float:
    per_layer = [
        min(seq_len, a["window"]) if t == "sliding_attention" and a["window"] and not full_length else seq_len
        for t in a["layer_types"]
    ]
    return seqs * sum(per_layer) * 2 * a["kv"] * elem


def no_grad_layer_per_token(a: dict[str, Any], d: Dtypes, attn: str, seq_len: int) -> float:
    """Transient of one layer's no-grad forward: the residual, the fp32 norm input, then the MLP's (routed experts:
    gathered inputs, grouped-GEMM outputs, the clamp/GLU pieces) or eager attention's intermediates."""
    mlp = a["k"] * d.act * (9 * a["I"] + 2 * a["h"]) if a["experts"] else 3 * d.act * a["I"]
    inner = max(mlp, a["heads"] * seq_len * (4 + d.act) if attn == "eager" else 0)
    return d.res * a["h"] + 4 * a["h"] + d.act * a["h"] + inner
