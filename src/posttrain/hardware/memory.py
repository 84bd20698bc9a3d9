"""The memory model: peak bytes per device of one training run, from model config × algo × hw × kernels.

peak = persistent + max(train phase, generation phase, optimizer-step phase), where
- persistent: weights (load dtype; MXFP4 dequantized to bf16; bitsandbytes 4-bit layer linears at 4.5 bits),
  LoRA adapters (fp32 under PEFT), optimizer states, a frozen reference or context-encoder copy, a colocated
  vLLM's reservation, and framework overhead (`hw.overhead_gib`);
- train phase: saved activations (+ one layer's backward working set; with checkpointing only each layer's
  input plus one recomputed layer), the loss's logits (TRL's chunked log-prob tiles for kernels=trl|chunked;
  a materialized `[tokens, V]` fp32 for eager and HF-forward losses; one sequence for liger; none for fused|pallas),
  and the gradients that exist while activations are alive;
- generation phase (algorithms that sample with HF generate): KV cache of a whole rollout (sliding layers keep the
  window) and
  the prefill's transient;
- step phase: all gradients + the optimizer's temporaries (foreach: one state-sized copy; fused/8-bit: none).

Per-token activation coefficients were measured on CPU with `torch.autograd.graph.saved_tensors_hooks`
(transformers 5.23, LlamaForCausalLM sdpa/eager, GptOssForCausalLM eager) and are exact for those shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Workload
from posttrain.algos.registry import get_algorithm
from posttrain.hardware.params import ParamCounts, count_params
from posttrain.hardware.profile import sharding
from posttrain.models import attn_implementation, torch_dtype
from posttrain.training_args import gradient_checkpointing

GIB = 1024**3
BNB4_BYTES = 0.5625  # NF4: 4 bits + one fp32 absmax per 64 weights


@dataclass
class Item:
    name: str
    bytes: float
    phase: str  # persistent | train | generate | step
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
        "hq": heads * head_dim,
        "kv": c.num_key_value_heads * head_dim,
        "experts": experts,
        "k": getattr(c, "num_experts_per_tok", 1) or 1,
        "window": getattr(c, "sliding_window", None),
        "layer_types": list(getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers),
    }


def layer_bytes_per_token(a: dict[str, Any], act: int, attn: str, seq_len: int) -> float:
    """Bytes autograd saves per token in one decoder layer (act: bytes per activation element)."""
    h, hq, kv, inter = a["h"], a["hq"], a["kv"], a["I"]
    norms = 2 * (4 * h + 2 * act * h)  # fp32 upcast, x*rsqrt, cast back, output
    if attn == "eager":  # q, repeated k and v, output, and the [heads, seq] probabilities per token
        att = act * (4 * hq + a["heads"] * (seq_len + 1))
    else:  # sdpa / flash: q, k, v, output, log-sum-exp
        att = act * (2 * hq + 2 * kv) + 4 * a["heads"]
    if a["experts"]:  # each routed token: gathered input, gate_up, clamp/glu pieces, down input, output
        mlp = a["k"] * act * (7 * inter + 2 * h) + (4 * h if act < 4 else 0) + 8 * a["experts"]
    else:  # gate, up, silu(gate), silu*up
        mlp = act * 4 * inter
    return norms + att + mlp


def activation_bytes(a: dict[str, Any], act: int, attn: str, seqs: int, seq_len: int, checkpointing: bool) -> float:
    tokens = seqs * seq_len
    layer = layer_bytes_per_token(a, act, attn, seq_len) * tokens
    rest = (4 * a["h"] + 2 * act * a["h"] + 16) * tokens  # final norm, ids
    if checkpointing:  # each layer's input kept; one layer recomputed in backward, plus its gradients
        return a["L"] * act * a["h"] * tokens + rest + 2 * layer
    return a["L"] * layer + rest + layer


TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK = 4096, 32768  # trl.kernels.chunked_logprob tile


def logits_bytes(
    backend: str, a: dict[str, Any], act: int, seqs: int, logit_tokens: int, seq_len: int, device: str
) -> tuple[float, str]:
    """Bytes the loss's LM-head projection holds at its peak (forward and backward)."""
    vocab = a["V"]
    if logit_tokens == 0:
        return 0.0, "no LM loss"
    if backend in ("trl", "chunked"):
        # TRL 1.16 scores through ChunkedLogProbFunction: one [4096 tokens, 32768 vocab] tile at a time. Without
        # Triton (CPU, XLA) `trl` scores every position, and the torch-op fold makes ~7 tile-sized temporaries
        # (measured on CPU, experiments/memory_plan); the Triton fold on CUDA keeps the tile and its gradient.
        n = seqs * (seq_len - 1) if backend == "trl" and device != "cuda" else seqs * logit_tokens
        tile = min(n, TRL_TOKEN_CHUNK) * min(vocab, TRL_VOCAB_CHUNK) * max(act, 4 if device != "cuda" else act)
        k = 2 if device == "cuda" else 7
        return k * tile + n * a[
            "h"
        ] * 4, f"{n} tokens in [{min(n, TRL_TOKEN_CHUNK)}, {min(vocab, TRL_VOCAB_CHUNK)}] tiles ({backend})"
    n = seqs * logit_tokens
    if backend == "eager":  # fp32 [N, V] logits, log-softmax, gradient
        return n * vocab * (12 + (act if act < 4 else 0)), f"[{n} tokens, {vocab}] materialized in fp32 (eager)"
    if backend == "liger":
        return logit_tokens * vocab * 12, "one sequence at a time (Liger fused linear)"
    return n * a["h"] * 8 + 256 * 2048 * 4 * 2, f"no [tokens, V] tensor ({backend})"


def kv_cache_bytes(a: dict[str, Any], act: int, seqs: int, seq_len: int) -> float:
    per_layer = [
        min(seq_len, a["window"]) if t == "sliding_attention" and a["window"] else seq_len for t in a["layer_types"]
    ]
    return seqs * sum(per_layer) * 2 * a["kv"] * act


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


def plan(cfg: DictConfig) -> Plan:
    """The memory plan of `cfg` (after `apply_profile`): per-device bytes per component and the peak."""
    hw, model_cfg = cfg.hw, cfg.model
    work = get_algorithm(cfg.algo.name).workload(cfg)
    counts = count_params(cfg, work.train_mode)
    a = _arch(cfg)
    wdtype = torch_dtype(model_cfg, hw)
    act = 2 if hw.precision in ("bf16", "fp16") else wdtype.itemsize
    attn = attn_implementation(model_cfg)
    gc = gradient_checkpointing(cfg)
    split = sharding(hw)
    n_dev = max(int(hw.num_devices), 1)
    shard_all = n_dev if split == "all" else 1
    shard_grad = n_dev if split in ("all", "grads+optimizer") else 1
    shard_opt = n_dev if split != "none" else 1
    mode = work.train_mode
    items: list[Item] = []

    weights = float(counts.weight_bytes)
    wnote = f"{counts.total / 1e9:.3g}B params in {str(wdtype).removeprefix('torch.')}"
    if model_cfg.quantization == "mxfp4":
        wnote += " (MXFP4 dequantized)"
    if model_cfg.quantization == "bnb4":
        weights -= counts.layer_linear * counts.dtype_bytes * (1 - BNB4_BYTES / counts.dtype_bytes)
        wnote += f" (layer linears NF4: {BNB4_BYTES} B/param)"
    if counts.adapters:
        wnote += f" + {counts.adapters / 1e6:.3g}M LoRA params"
    items.append(Item("weights", weights / shard_all, "persistent", wnote))
    base_bytes = counts.total * counts.dtype_bytes
    if work.ref_copy:
        items.append(Item("reference model", base_bytes / shard_all, "persistent", "frozen copy (beta > 0, no LoRA)"))
    if work.encoder_copy:
        items.append(Item("context encoder", base_bytes / shard_all, "persistent", "frozen copy of the base"))
    if work.rollout_copy:
        copy_bytes = 2 * counts.total * 2
        items.append(Item("rollout copy", copy_bytes, "persistent", "bf16 weights + their oneDNN-packed layout"))

    trainable, tbytes = counts.trainable + work.extra_trainable, counts.trainable_bytes + 4 * work.extra_trainable
    states, temp, onote = optimizer_bytes(hw, trainable, tbytes, max(counts.largest_trainable, work.extra_trainable))
    items.append(Item("optimizer states", states / shard_opt, "persistent", f"{hw.optimizer}: {onote}"))
    if work.vllm_colocated:
        share = float(hw.vllm_gpu_memory_utilization)
        items.append(
            Item("vLLM (colocated)", share * hw.device_gib * GIB, "persistent", f"gpu_memory_utilization={share}")
        )
    items.append(Item("framework overhead", hw.overhead_gib * GIB, "persistent", f"hw.overhead_gib on {hw.device}"))

    acts = activation_bytes(a, act, attn, work.seqs, work.seq_len, gc)
    items.append(
        Item(
            "activations",
            acts,
            "train",
            f"{work.seqs} x {work.seq_len} tokens, {attn}, checkpointing {'on' if gc else 'off'}",
        )
    )
    if work.encoder_seqs:
        enc = work.encoder_seqs * work.encoder_len * a["h"] * act * (a["L"] + 1)
        items.append(Item("encoder hidden states", enc, "train", f"{work.encoder_seqs} x {work.encoder_len} tokens"))
    backend = work.loss_backend
    lbytes, lnote = logits_bytes(backend, a, act, work.seqs, work.logit_tokens, work.seq_len, hw.device)
    if mode == "full" and backend in ("fused", "triton", "pallas"):  # the head's fp32 gradient, built tile by tile
        lbytes += a["V"] * a["h"] * 4
        lnote += " + the head's fp32 weight gradient"
    items.append(Item("logits", lbytes, "train", lnote))
    head = (counts.lm_head or counts.embedding) * counts.dtype_bytes
    live_grads = tbytes if mode != "full" else min(tbytes, head)
    items.append(
        Item(
            "gradients (in backward)",
            live_grads / shard_grad,
            "train",
            "LM head first" if mode == "full" else "adapters",
        )
    )

    if work.gen_seqs:
        kv = kv_cache_bytes(a, act, work.gen_seqs, work.gen_len)
        items.append(Item("KV cache", kv, "generate", f"{work.gen_seqs} sequences x {work.gen_len} tokens"))
        prompt = work.gen_prompt_len or work.gen_len
        prefill = work.gen_seqs * prompt * act * (4 * a["h"] + 2 * a["I"] * a["k"])
        if attn == "eager":
            prefill += work.gen_seqs * a["heads"] * prompt * prompt * act * 2
        prefill += work.gen_seqs * a["V"] * 4 * 2
        items.append(Item("prefill / sampling", prefill, "generate", "one layer at a time, last-token logits"))

    items.append(Item("gradients", tbytes / shard_grad, "step", f"{trainable / 1e6:.4g}M trainable"))
    items.append(Item("optimizer step temporaries", temp / shard_opt, "step", hw.optimizer))

    result = Plan(counts=counts, work=work, items=items, device_bytes=hw.device_gib * GIB)
    phases = {p: result.phase_bytes(p) for p in ("train", "generate", "step")}
    result.peak_phase = max(phases, key=lambda p: phases[p])
    result.peak_bytes = result.phase_bytes("persistent") + phases[result.peak_phase]
    result.extra = {"train_mode": mode, "sharding": split, "backend": backend, "checkpointing": gc}
    return result
