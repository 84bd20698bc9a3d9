"""The memory model: peak bytes per device of one training run, from model config x algo x hw x kernels.

peak = persistent + the largest of four phases:
- persistent: weights (load dtype; MXFP4 dequantized to bf16; bitsandbytes 4-bit layer linears at 4.5 bits; an
  output projection TRL casts to fp32), LoRA adapters (fp32 under PEFT), optimizer states of what trains, a frozen
  reference or context-encoder copy, a merged rollout copy and its static KV cache, a colocated vLLM's reservation,
  and framework overhead (`hw.overhead_gib`: CUDA context and allocator slack, or the process before the model on
  a CPU; not part of `torch.cuda.max_memory_allocated`, hence `tensor_bytes`);
- train (forward + backward of one micro-batch): the largest of the moments the backward passes through, each the
  sum of what is alive then (`train_moments`): the loss's backward (everything the layers keep + the head's
  working set), the top layer's backward, the bottom layer's backward (with the gradients of every layer above),
  for full fine-tuning with a tied head the embedding's backward (every gradient + its dense gradient), and an
  algorithm's own forward and backward (`Workload.extra_*`);
- score (an algorithm's no-grad log-prob passes, `Workload.score_seqs`: a reference or old policy): one layer at a
  time, then the head's forward;
- generate (HF generate on the policy or its rollout copy): a whole rollout's KV cache and the prefill transient;
- step: all gradients + the optimizer's temporaries (foreach: one state-sized copy; fused/8-bit: none).

What a layer keeps for the backward is counted tensor by tensor as transformers' Llama layer and PEFT's LoRA form
them (`layer_saved_per_token`): a frozen linear keeps nothing (its input gradient needs only the weight), a trained
weight or adapter keeps its input (its own bf16 copy under autocast when the weight it multiplies has another dtype),
RMSNorm keeps its fp32 input, SDPA keeps q, k and v (k and v repeated to every query head when a padding mask is
passed), its output and log-sum-exp, the MLP keeps gate, up and silu(gate). Checked against peak live tensor bytes of
CPU training steps (`tests/hardware/test_plan_vs_measured.py`) and H100 allocator peaks (experiments/memory_plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Workload
from posttrain.algos.registry import get_algorithm
from posttrain.hardware.params import ParamCounts, count_params
from posttrain.hardware.sharding import sharding
from posttrain.models import attn_implementation, torch_dtype
from posttrain.training_args import gradient_checkpointing

GIB = 1024**3
BNB4_BYTES = 0.5625  # NF4: 4 bits + one fp32 absmax per 64 weights
TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK = 4096, 32768  # trl.kernels.chunked_logprob: [4096 tokens, 32768 vocab] tiles
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Item:
    name: str
    bytes: float
    phase: str  # persistent | train | score | generate | step
    note: str = ""


@dataclass
class Plan:
    counts: ParamCounts
    work: Workload
    items: list[Item]
    device_bytes: float
    peak_bytes: float = 0.0
    peak_phase: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device_bytes

    @property
    def tensor_bytes(self) -> float:
        """The peak without the framework overhead: what an allocator's peak (`torch.cuda.max_memory_allocated`,
        peak live tensor bytes on a CPU) counts."""
        return self.peak_bytes - sum(i.bytes for i in self.items if i.name == "framework overhead")

    def phase_bytes(self, phase: str) -> float:
        return sum(i.bytes for i in self.items if i.phase == phase)


def _arch(cfg: DictConfig) -> dict[str, Any]:
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
    if backend == "liger":
        return logit_tokens * vocab * 12, logit_tokens * vocab * 4, "one sequence at a time (Liger fused linear)"
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


def optimizer_bytes(hw: DictConfig, trainable: int, trainable_bytes: int, largest: int) -> tuple[float, float, str]:
    """(states, step temporaries, note) for `hw.optimizer` (HF `optim` names)."""
    name = hw.optimizer
    per_elem = trainable_bytes / max(trainable, 1)
    if "deepspeed" in (hw.accelerate_config or "") and hw.num_devices > 1:
        return 12.0 * trainable, 0.0, "DeepSpeed: fp32 master + 2 fp32 moments"
    if "8bit" in name:
        return 2.0 * trainable, 0.0, "2 x 8-bit moments (bitsandbytes)"
    if name.startswith("sgd"):
        return 0.0, 0.0, "no state"
    states = 2.0 * trainable_bytes
    if "fused" in name:
        return states, 0.0, f"2 moments in the parameter dtype ({per_elem:g} B), fused step"
    if hw.device == "cpu":  # single-tensor loop: temporaries of the largest tensor
        return states, 2.0 * largest * per_elem, f"2 moments ({per_elem:g} B/param), per-tensor step"
    return states, float(trainable_bytes), f"2 moments ({per_elem:g} B/param), foreach step temporaries"


@dataclass
class Moment:
    """What is alive at one point of the backward: named parts in bytes."""

    name: str
    activations: float
    logits: float = 0.0
    extra: float = 0.0
    grads: float = 0.0

    @property
    def total(self) -> float:
        return self.activations + self.logits + self.extra + self.grads


def train_moments(
    cfg: DictConfig, a: dict[str, Any], d: Dtypes, counts: ParamCounts, work: Workload, grads: dict[str, float]
) -> tuple[list[Moment], dict[str, Any]]:
    """The moments of one micro-batch's backward and the terms they are made of."""
    attn = attn_implementation(cfg.model)
    gc = gradient_checkpointing(cfg)
    full = work.train_mode == "full"
    adapted = None if full else frozenset(_adapted(cfg, work))
    tokens = work.seqs * work.seq_len
    saved = layer_saved_per_token(a, d, attn, work.seq_len, adapted, int(cfg.model.lora.r)) * tokens
    backward = layer_backward_per_token(a, d, attn, work.seq_len) * tokens
    rest = outside_layers_per_token(a, d, full, work.seq_len) * tokens
    kept_layer = d.res * a["h"] * tokens if gc else saved  # a checkpointed layer keeps only its input
    # a recomputed layer's fp32 input norm keeps the checkpointed input itself when the residual stream is fp32
    working = (saved - (4 * a["h"] * tokens if d.res == 4 else 0.0) if gc else 0.0) + backward
    rows = work.seqs if work.logit_rows is None else work.logit_rows
    head, _, head_note = head_bytes(
        work.loss_backend,
        a,
        d,
        rows,
        work.logit_tokens,
        work.seq_len,
        cfg.hw.device,
        work.head_compute_fp32,
        work.head_weight_fp32,
    )
    if full and work.loss_backend in ("fused", "triton", "pallas", "trl", "chunked"):
        head_note += "; the head's fp32 weight gradient"  # accumulated tile by tile in fp32
        head += a["V"] * a["h"] * 4 - (grads["head"] if work.head_weight_fp32 or counts.dtype_bytes == 4 else 0)
    kept = a["L"] * kept_layer + rest
    extra = work.extra_kept_bytes
    moments = [
        Moment("the loss's backward", kept, head, extra + work.extra_top_bytes, grads["head"]),
        Moment("the top layer's backward", kept + working, 0.0, extra, grads["head"]),
        Moment("the bottom layer's backward", kept_layer + working, 0.0, extra, grads["below_bottom"]),
    ]
    if work.extra_forward_bytes:
        moments.append(Moment("the algorithm's own forward", 0.0, 0.0, work.extra_forward_bytes, 0.0))
    if work.extra_trainable:  # its gradients come last, after the base model's backward
        moments.append(Moment("the algorithm's own backward", 0.0, 0.0, extra, grads["all"]))
    if grads["embedding_dense"]:
        moments.append(Moment("the embedding's backward", 0.0, 0.0, extra, grads["all"] + grads["embedding_dense"]))
    terms = {"attn": attn, "gc": gc, "tokens": tokens, "head_note": head_note, "saved": saved}
    return moments, terms


def _adapted(cfg: DictConfig, work: Workload) -> tuple[str, ...]:
    if work.adapted_modules is not None:
        return tuple(work.adapted_modules)
    return tuple(cfg.model.lora.target_modules) if work.train_mode == "lora" else ()


def plan(cfg: DictConfig) -> Plan:
    """The memory plan of `cfg` (after `apply_profile`): per-device bytes per component and the peak."""
    hw, model_cfg = cfg.hw, cfg.model
    work = get_algorithm(cfg.algo.name).workload(cfg)
    counts = count_params(cfg, work.train_mode)
    a = _arch(cfg)
    d = dtypes(cfg)
    wdtype = torch_dtype(model_cfg, hw)
    split = sharding(hw)
    n_dev = max(int(hw.num_devices), 1)
    shard_all = n_dev if split == "all" else 1
    shard_grad = n_dev if split in ("all", "grads+optimizer") else 1
    shard_opt = n_dev if split != "none" else 1
    mode = work.train_mode
    items: list[Item] = []

    head_params = counts.lm_head or counts.embedding
    head_upcast = head_params * (4 - counts.dtype_bytes) if work.head_weight_fp32 else 0
    weights = float(counts.weight_bytes) + head_upcast
    wnote = f"{counts.total / 1e9:.3g}B params in {str(wdtype).removeprefix('torch.')}"
    if model_cfg.quantization == "mxfp4":
        wnote += " (MXFP4 dequantized)"
    if model_cfg.quantization == "bnb4":
        weights -= counts.layer_linear * counts.dtype_bytes * (1 - BNB4_BYTES / counts.dtype_bytes)
        wnote += f" (layer linears NF4: {BNB4_BYTES} B/param)"
    if head_upcast:
        wnote += " (output projection in fp32)"
    if counts.adapters:
        wnote += f" + {counts.adapters / 1e6:.3g}M LoRA params"
    items.append(Item("weights", weights / shard_all, "persistent", wnote))
    base_bytes = counts.total * counts.dtype_bytes + head_upcast
    if work.ref_copy:
        items.append(Item("reference model", base_bytes / shard_all, "persistent", "frozen copy (beta > 0, no LoRA)"))
    if work.encoder_copy:
        items.append(Item("context encoder", base_bytes / shard_all, "persistent", "frozen copy of the base"))
    if work.rollout_copy_dtype:
        import torch

        elem = getattr(torch, work.rollout_copy_dtype).itemsize
        copy_bytes = counts.total * elem
        cnote = f"merged copy in {work.rollout_copy_dtype}"
        if work.rollout_packed:  # every nn.Linear weight again in oneDNN's packed layout (the head too)
            copy_bytes += (counts.layer_linear + a["V"] * a["h"]) * elem
            cnote += " + its oneDNN-packed linear weights"
        items.append(Item("rollout copy", copy_bytes, "persistent", cnote))
        if work.static_cache_len:
            static = kv_cache_bytes(a, elem, work.gen_seqs, work.static_cache_len, full_length=True)
            items.append(
                Item(
                    "static KV cache",
                    static,
                    "persistent",
                    f"{work.gen_seqs} sequences x {work.static_cache_len} positions, every layer full-length",
                )
            )

    trainable = counts.trainable + work.extra_trainable
    tbytes = counts.trainable_bytes + 4 * work.extra_trainable + (head_upcast if mode == "full" else 0)
    states, temp, onote = optimizer_bytes(hw, trainable, tbytes, max(counts.largest_trainable, work.extra_trainable))
    items.append(Item("optimizer states", states / shard_opt, "persistent", f"{hw.optimizer}: {onote}"))
    if work.vllm_colocated:
        share = float(hw.vllm_gpu_memory_utilization)
        items.append(
            Item("vLLM (colocated)", share * hw.device_gib * GIB, "persistent", f"gpu_memory_utilization={share}")
        )
    items.append(Item("framework overhead", hw.overhead_gib * GIB, "persistent", f"hw.overhead_gib on {hw.device}"))

    # gradients alive during the backward (full fine-tuning: the head's first, every layer's by the bottom; a tied
    # embedding accumulates one more dense [V, H] gradient into the head's at the very end)
    head_grad = head_params * (4 if work.head_weight_fp32 else counts.dtype_bytes) if mode == "full" else 0.0
    embedding_grad = 0.0 if a["tied"] or mode != "full" else counts.embedding * counts.dtype_bytes
    base_grads = tbytes - 4 * work.extra_trainable  # the hypernet's / projection head's come after the base's
    layer_grads = (base_grads - head_grad - embedding_grad) / a["L"] if mode == "full" else 0.0
    grads = {
        "all": float(tbytes),
        "head": head_grad,
        "below_bottom": base_grads - embedding_grad - layer_grads,  # every base gradient but embedding's, layer 0's
        "embedding_dense": head_grad if mode == "full" and a["tied"] else 0.0,
    }
    moments, terms = train_moments(cfg, a, d, counts, work, grads)
    worst = max(moments, key=lambda m: m.total)
    gc_note = "checkpointing on" if terms["gc"] else "checkpointing off"
    items.append(
        Item(
            "activations",
            worst.activations,
            "train",
            f"{work.seqs} x {work.seq_len} tokens, {terms['attn']}, {gc_note}; at {worst.name}",
        )
    )
    if worst.extra:
        items.append(Item(work.extra_note or "algorithm tensors", worst.extra, "train", "kept for the backward"))
    items.append(Item("logits", worst.logits, "train", terms["head_note"]))
    items.append(
        Item(
            "gradients (in backward)",
            worst.grads / shard_grad,
            "train",
            "adapters" if mode != "full" else f"alive at {worst.name}",
        )
    )

    if work.score_seqs:
        rows = work.score_seqs
        layer = no_grad_layer_per_token(a, d, terms["attn"], work.seq_len) * rows * work.seq_len
        _, head_fwd, _ = head_bytes(
            work.loss_backend,
            a,
            d,
            rows,
            work.logit_tokens,
            work.seq_len,
            hw.device,
            work.head_compute_fp32,
            work.head_weight_fp32,
        )
        items.append(
            Item(
                "log-prob pass",
                max(layer, head_fwd),
                "score",
                f"{rows} x {work.seq_len} tokens, no grad: one layer, then the head",
            )
        )

    if work.gen_seqs:
        gen_d = d
        if work.rollout_copy_dtype:
            import torch

            elem = getattr(torch, work.rollout_copy_dtype).itemsize
            gen_d = Dtypes(act=elem, res=elem)
        else:  # TRL generates outside the trainer's autocast: in the weights' dtype
            gen_d = Dtypes(act=d.res, res=d.res)
        if not work.static_cache_len:
            kv = kv_cache_bytes(a, gen_d.act, work.gen_seqs, work.gen_len)
            items.append(Item("KV cache", kv, "generate", f"{work.gen_seqs} sequences x {work.gen_len} tokens"))
        prompt = work.gen_prompt_len or work.gen_len
        prefill = no_grad_layer_per_token(a, gen_d, terms["attn"], prompt) * work.gen_seqs * prompt
        prefill += work.gen_seqs * a["V"] * (gen_d.act + 12)  # last-token logits, fp32 copy, processors, softmax
        items.append(Item("prefill / sampling", prefill, "generate", "one layer at a time, last-token logits"))

    items.append(Item("gradients", tbytes / shard_grad, "step", f"{trainable / 1e6:.4g}M trainable"))
    items.append(Item("optimizer step temporaries", temp / shard_opt, "step", hw.optimizer))

    result = Plan(counts=counts, work=work, items=items, device_bytes=hw.device_gib * GIB)
    phases = {p: result.phase_bytes(p) for p in ("train", "score", "generate", "step")}
    result.peak_phase = max(phases, key=lambda p: phases[p])
    result.peak_bytes = result.phase_bytes("persistent") + phases[result.peak_phase]
    result.extra = {
        "train_mode": mode,
        "sharding": split,
        "backend": work.loss_backend,
        "checkpointing": terms["gc"],
        "train_moment": worst.name,
        "moments_gib": {m.name: round(m.total / GIB, 4) for m in moments},
    }
    return result
