"""The memory model: peak bytes per device of one training run, from model config x algo x hw x kernels.

peak = persistent + the largest of five phases:
- persistent: weights (load dtype; MXFP4 experts dequantized to bf16, or kept in their 17 bytes per 32 values with
  `model.mxfp4=native`; bitsandbytes 4-bit layer linears at 4.5 bits; an output projection TRL casts to fp32),
  LoRA adapters (fp32 under PEFT), optimizer states of what trains, the other copies of the weights an algorithm
  keeps (`Workload.copies`: a frozen reference, a merged rollout copy), its preallocated KV caches and the device
  shares other engines reserve (`Workload.caches`, `Workload.reserved`),
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
- step: all gradients + the optimizer's temporaries (foreach: one state-sized copy; fused/8-bit: none);
- save (a sharded engine writing a checkpoint): what it gathers (`posttrain.hardware.engine_memory`, with what a
  sharded engine holds beside its shards in the other phases).
Items of phase `forward` are alive in every phase that runs the model (train, score, generate): native MXFP4
experts' dequantization scratch (one expert's gate_up in bf16 on a CPU; every expert of a layer on CUDA, where the
grouped GEMM reads them all at once).

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
from posttrain.hardware.engine_memory import engine_items
from posttrain.hardware.params import ParamCounts, count_params
from posttrain.hardware.sharding import engine_of, sharding
from posttrain.hardware.tensor_bytes import (
    Dtypes,
    arch,
    dtypes,
    head_bytes,
    kv_cache_bytes,
    layer_backward_per_token,
    layer_saved_per_token,
    no_grad_layer_per_token,
    outside_layers_per_token,
)
from posttrain.models import attn_implementation, torch_dtype
from posttrain.training_args import gradient_checkpointing

GIB = 1024**3
BNB4_BYTES = 0.5625  # NF4: 4 bits + one fp32 absmax per 64 weights
FORWARD_PHASES = ("train", "score", "generate")  # the phases an item of phase "forward" is alive in
SPANS = {"forward": FORWARD_PHASES, "backward+step": ("train", "step")}  # items alive in more than one phase


@dataclass
class Item:
    name: str
    bytes: float
    phase: str  # persistent | train | score | generate | step | save, or a span of SPANS
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
        return sum(i.bytes for i in self.items if i.phase == phase or phase in SPANS.get(i.phase, ()))


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


def _itemsize(dtype: str) -> int:
    import torch

    return int(getattr(torch, dtype).itemsize)


def train_moments(
    cfg: DictConfig, a: dict[str, Any], d: Dtypes, counts: ParamCounts, work: Workload, grads: dict[str, float]
) -> tuple[list[Moment], dict[str, Any]]:
    """The moments of one micro-batch's backward and the terms they are made of."""
    attn = attn_implementation(cfg.model)
    attn = "eager" if attn.startswith("eager") else attn  # eager_thread_invariant keeps what eager keeps
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
    a = arch(cfg)
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
    if counts.mxfp4_bytes:
        wnote += f" (experts in MXFP4: {counts.mxfp4_bytes / GIB:.2f} GiB)"
    elif model_cfg.quantization == "mxfp4":
        wnote += " (MXFP4 dequantized)"
    if model_cfg.quantization == "bnb4":
        weights -= counts.layer_linear * counts.dtype_bytes * (1 - BNB4_BYTES / counts.dtype_bytes)
        wnote += f" (layer linears NF4: {BNB4_BYTES} B/param)"
    if head_upcast:
        wnote += " (output projection in fp32)"
    if counts.adapters:
        wnote += f" + {counts.adapters / 1e6:.3g}M LoRA params"
    items.append(Item("weights", weights / shard_all, "persistent", wnote))
    mxfp4_values = counts.experts if counts.mxfp4_bytes else 0
    base_bytes = (counts.total - mxfp4_values) * counts.dtype_bytes + counts.mxfp4_bytes + head_upcast
    for copy in work.copies:
        if copy.dtype is None:  # as the trained weights are held
            items.append(Item(copy.name, base_bytes / shard_all, "persistent", copy.note))
            continue
        elem = _itemsize(copy.dtype)
        copy_bytes = (counts.total - mxfp4_values) * elem + counts.mxfp4_bytes
        cnote = copy.note
        if copy.packed_linears:  # every nn.Linear weight again in oneDNN's packed layout (the head too)
            copy_bytes += (counts.layer_linear + a["V"] * a["h"]) * elem
            cnote += " + its oneDNN-packed linear weights"
        items.append(Item(copy.name, copy_bytes, "persistent", cnote))
    for cache in work.caches:
        elem = _itemsize(cache.dtype) if cache.dtype else counts.dtype_bytes
        static = kv_cache_bytes(a, elem, cache.seqs, cache.positions, full_length=True)
        items.append(Item(cache.name, static, "persistent", cache.note))
    if counts.mxfp4_bytes:
        gate_up = 2 * a["I"] * a["h"] * d.act  # one expert's gate_up projection, dequantized
        experts = a["experts"] if hw.device == "cuda" else 1
        items.append(
            Item(
                "MXFP4 dequantization",
                experts * gate_up,
                "forward",
                f"{experts} expert gate_up weight{'s' if experts > 1 else ''} at a time, in the compute dtype",
            )
        )

    trainable = counts.trainable + work.extra_trainable
    tbytes = counts.trainable_bytes + 4 * work.extra_trainable + (head_upcast if mode == "full" else 0)
    states, temp, onote = optimizer_bytes(hw, trainable, tbytes, max(counts.largest_trainable, work.extra_trainable))
    items.append(Item("optimizer states", states / shard_opt, "persistent", f"{hw.optimizer}: {onote}"))
    for reservation in work.reserved:
        items.append(Item(reservation.name, reservation.share * hw.device_gib * GIB, "persistent", reservation.note))
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
    grad_elem = tbytes / max(trainable, 1)
    deepspeed = engine_of(hw) in ("zero2", "zero3")  # gradients go to its bucket and partition as they form
    if deepspeed:
        in_backward = float(counts.largest_trainable * counts.dtype_bytes)
        gnote = "DeepSpeed: one, before it enters the bucket"
    else:
        in_backward, gnote = worst.grads / shard_grad, "adapters" if mode != "full" else f"alive at {worst.name}"
    items.append(Item("gradients (in backward)", in_backward, "train", gnote))
    for it in engine_items(hw, counts, a["L"], mode == "full", grad_elem):
        items.append(Item(it.name, it.bytes, it.phase, it.note))

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
        if work.gen_dtype:
            elem = _itemsize(work.gen_dtype)
            gen_d = Dtypes(act=elem, res=elem)
        else:  # TRL generates outside the trainer's autocast: in the weights' dtype
            gen_d = Dtypes(act=d.res, res=d.res)
        if not work.caches:  # else generation writes into the preallocated cache
            kv = kv_cache_bytes(a, gen_d.act, work.gen_seqs, work.gen_len)
            items.append(Item("KV cache", kv, "generate", f"{work.gen_seqs} sequences x {work.gen_len} tokens"))
        prompt = work.gen_prompt_len or work.gen_len
        prefill = no_grad_layer_per_token(a, gen_d, terms["attn"], prompt) * work.gen_seqs * prompt
        prefill += work.gen_seqs * a["V"] * (gen_d.act + 12)  # last-token logits, fp32 copy, processors, softmax
        items.append(Item("prefill / sampling", prefill, "generate", "one layer at a time, last-token logits"))

    if not deepspeed:  # DeepSpeed's are its gradient partition
        items.append(Item("gradients", tbytes / shard_grad, "step", f"{trainable / 1e6:.4g}M trainable"))
    items.append(Item("optimizer step temporaries", temp / shard_opt, "step", hw.optimizer))

    result = Plan(counts=counts, work=work, items=items, device_bytes=hw.device_gib * GIB)
    phases = {p: result.phase_bytes(p) for p in ("train", "score", "generate", "step", "save")}
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
