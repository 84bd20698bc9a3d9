"""GPT-OSS experts that stay MXFP4: frozen blocks and scales, each routed expert dequantized on the fly.

`to_native(model)` turns every `GptOssExperts` of a transformers GPT-OSS model into the checkpoint's own layout: its
bf16 `gate_up_proj` / `down_proj` parameters are replaced by uint8 buffers `gate_up_proj_blocks`,
`gate_up_proj_scales`, `down_proj_blocks`, `down_proj_scales` (the names and shapes of openai/gpt-oss-20b's
safetensors, so a state dict loads and saves as the checkpoint has it), the biases stay as frozen parameters, and the
model's experts implementation becomes `NATIVE` (registered in transformers' `ExpertsInterface`, the dispatch
`GptOssExperts.forward` goes through). Nothing of transformers' modeling code is copied or patched.

The forward (`native_experts_forward`) computes each expert's two projections with `Mxfp4Linear`, an autograd
function that dequantizes the expert's weight for the forward and again for the backward (nothing but the uint8
tensors is kept): the activations get their gradient, the frozen experts none. The router and the gate stay
transformers' (`self._apply_gate`), so routing weights and the router receive gradients as in bf16 training.
- CPU (and any device without the grouped path): a loop over the experts the batch routes to, one expert
  dequantized at a time (33 MB of scratch for gpt-oss-20b, only the routed experts read);
- CUDA, and any compiled forward (a compiled decode step): every routed expert of the layer dequantized into one
  scratch tensor (on CUDA by a Triton kernel, posttrain.kernels.mxfp4_dequant, which masks off the experts no token
  routes to on the device, no host sync), then torch's grouped GEMM over the expert-sorted tokens, as transformers'
  `grouped_mm` implementation does for bf16 weights.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posttrain.models.mxfp4.codec import BYTES_PER_GROUP, GROUP, dequantize, fill_random_

NATIVE = "posttrain_mxfp4"
PROJECTIONS = ("gate_up_proj", "down_proj")


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


_SCRATCH: dict[tuple, torch.Tensor] = {}


def _scratch(blocks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One reusable weight-sized tensor per shape and dtype: the loop dequantizes into it, the GEMM reads it, nothing
    keeps it (gpt-oss-20b: 33 + 17 MB, not a fresh allocation, faulted in page by page, per routed expert)."""
    shape = (*blocks.shape[:-2], blocks.shape[-2] * GROUP)
    key = (shape, dtype, blocks.device)
    if key not in _SCRATCH:
        _SCRATCH[key] = torch.empty(shape, dtype=dtype, device=blocks.device)
    return _SCRATCH[key]


class Mxfp4Linear(torch.autograd.Function):
    """y = x W^T + b for one expert, W [out, in] dequantized from (blocks, scales) in the forward and in the backward
    (into a scratch tensor that nothing keeps); frozen: only `x` gets a gradient."""

    @staticmethod
    def forward(ctx, x, blocks, scales, bias):
        dtype = _compute_dtype(x)
        ctx.save_for_backward(blocks, scales)
        ctx.x_dtype = x.dtype
        weight = dequantize(blocks, scales, dtype, out=_scratch(blocks, dtype))
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(x.to(dtype), weight, bias.to(dtype))

    @staticmethod
    def backward(ctx, grad):
        blocks, scales = ctx.saved_tensors
        grad_x = grad @ dequantize(blocks, scales, grad.dtype, out=_scratch(blocks, grad.dtype))
        return grad_x.to(ctx.x_dtype), None, None, None


class Mxfp4GroupedLinear(torch.autograd.Function):
    """y = x_s W_e(s)^T for expert-sorted rows `x` [S, in] (`offsets`: torch's grouped GEMM's cumulative row counts
    per expert), every routed expert's W dequantized into one [E, out, in] scratch tensor; frozen like Mxfp4Linear."""

    @staticmethod
    def forward(ctx, x, blocks, scales, offsets):
        dtype = _compute_dtype(x)
        ctx.save_for_backward(blocks, scales, offsets)
        ctx.x_dtype = x.dtype
        weight = _dequantize_routed(blocks, scales, offsets, dtype)
        with torch.autocast(x.device.type, enabled=False):
            return _grouped_mm(x.to(dtype), weight.transpose(-2, -1), offsets)

    @staticmethod
    def backward(ctx, grad):
        blocks, scales, offsets = ctx.saved_tensors
        weight = _dequantize_routed(blocks, scales, offsets, grad.dtype)
        grad_x = _grouped_mm(grad.contiguous(), weight, offsets)
        return grad_x.to(ctx.x_dtype), None, None, None


def _grouped_mm(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """[S, in] x [E, in, out] grouped by `offsets`: transformers' dispatch (torch's grouped GEMM where it applies:
    bf16 under compile, CUDA from sm80, CPU; else its own per-expert custom op, opaque to compile)."""
    from transformers.integrations.moe import _grouped_mm as dispatch

    return dispatch(x, weight, offs=offsets)


def _dequantize_routed(blocks, scales, offsets, dtype) -> torch.Tensor:
    # the Triton kernel; on CPU tensors only under Triton's interpreter (tests/models/test_mxfp4.py)
    if blocks.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        from posttrain.kernels.mxfp4_dequant import dequantize_cuda

        return dequantize_cuda(blocks, scales, dtype, offsets=offsets)
    return dequantize(blocks, scales, dtype)


def grouped_path(hidden_states: torch.Tensor) -> bool:
    """Whether the grouped GEMM path runs: on CUDA with bf16 compute (torch's grouped GEMM needs it), and under
    `torch.compile` (a compiled decode step: the loop's per-expert row counts would break the graph)."""
    if torch.compiler.is_compiling():
        return True
    return hidden_states.device.type == "cuda" and _compute_dtype(hidden_states) == torch.bfloat16


def _loop_forward(self: Any, hidden_states, top_k_index, top_k_weights) -> torch.Tensor:
    out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
    routed = torch.bincount(top_k_index.flatten(), minlength=self.num_experts).tolist()  # one host sync per layer
    for expert, count in enumerate(routed):
        if not count:
            continue
        token, slot = torch.where(top_k_index == expert)
        gate_up = Mxfp4Linear.apply(
            hidden_states[token],
            self.gate_up_proj_blocks[expert],
            self.gate_up_proj_scales[expert],
            self.gate_up_proj_bias[expert],
        )
        down = Mxfp4Linear.apply(
            self._apply_gate(gate_up),
            self.down_proj_blocks[expert],
            self.down_proj_scales[expert],
            self.down_proj_bias[expert],
        )
        out.index_add_(0, token, (down * top_k_weights[token, slot, None]).float())
    return out.to(hidden_states.dtype)


def _grouped_forward(self: Any, hidden_states, top_k_index, top_k_weights) -> torch.Tensor:
    k = top_k_index.size(-1)
    expert_ids, order = torch.sort(top_k_index.reshape(-1))
    x = hidden_states[order // k]
    # histc, not bincount: its output size does not depend on the data (no host sync); CPU histc takes floats only
    ids = expert_ids.int() if expert_ids.is_cuda else expert_ids.float()
    counts = torch.histc(ids, bins=self.num_experts, min=0, max=self.num_experts - 1)
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    gate_up = Mxfp4GroupedLinear.apply(x, self.gate_up_proj_blocks, self.gate_up_proj_scales, offsets)
    gate_up = gate_up + self.gate_up_proj_bias[expert_ids].to(gate_up.dtype)
    down = Mxfp4GroupedLinear.apply(self._apply_gate(gate_up), self.down_proj_blocks, self.down_proj_scales, offsets)
    down = down + self.down_proj_bias[expert_ids].to(down.dtype)
    weighted = down * top_k_weights.reshape(-1)[order, None].to(down.dtype)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    # the k routes of a token summed in one reduction (fp32 accumulation, one rounding), as transformers' grouped_mm
    return weighted[inverse].view(-1, k, weighted.size(-1)).sum(1).to(hidden_states.dtype)


def native_experts_forward(
    self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """`GptOssExperts.forward` for MXFP4 blocks and scales (the `ExpertsInterface` signature): [T, H] out."""
    if grouped_path(hidden_states):
        return _grouped_forward(self, hidden_states, top_k_index, top_k_weights)
    return _loop_forward(self, hidden_states, top_k_index, top_k_weights)


def register() -> None:
    """Make `NATIVE` an experts implementation transformers can dispatch to (idempotent)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(NATIVE, native_experts_forward)


def experts_modules(model: nn.Module) -> Iterator[tuple[str, Any]]:
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    for name, module in model.named_modules():
        if isinstance(module, GptOssExperts):
            yield name, module


def is_native(model: nn.Module) -> bool:
    return any(hasattr(m, "gate_up_proj_blocks") for _, m in experts_modules(model))


def block_shapes(module: Any) -> dict[str, tuple[int, ...]]:
    """The checkpoint's uint8 tensors of one experts module: name -> shape."""
    e, h, i = module.num_experts, module.hidden_size, module.intermediate_size
    for dim in (h, i):
        if dim % GROUP:
            raise ValueError(f"MXFP4 experts need hidden and intermediate sizes that are multiples of {GROUP}: {dim}")
    return {
        "gate_up_proj_blocks": (e, 2 * i, h // GROUP, BYTES_PER_GROUP),
        "gate_up_proj_scales": (e, 2 * i, h // GROUP),
        "down_proj_blocks": (e, h, i // GROUP, BYTES_PER_GROUP),
        "down_proj_scales": (e, h, i // GROUP),
    }


# modules the checkpoint keeps in bf16 (openai/gpt-oss-20b's config.json `modules_to_not_convert`)
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def to_native(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Replace every GPT-OSS experts module's bf16 weights by empty MXFP4 buffers (on `device`, default: where the
    weights were; the meta device keeps them unallocated) and dispatch its forward to `NATIVE`. In place."""
    from transformers import Mxfp4Config  # type: ignore[attr-defined]

    register()
    found = False
    for _, module in experts_modules(model):
        found = True
        where = device if device is not None else module.gate_up_proj_bias.device
        for name in PROJECTIONS:
            module._parameters.pop(name, None)
        for name, shape in block_shapes(module).items():
            module.register_buffer(name, torch.empty(shape, dtype=torch.uint8, device=where))
        for bias in (module.gate_up_proj_bias, module.down_proj_bias):
            bias.requires_grad_(False)
    if not found:
        raise ValueError("model.mxfp4=native: the model has no GPT-OSS experts")
    model.set_experts_implementation(NATIVE)
    # what save_pretrained writes: a checkpoint in the real MXFP4 format, loadable by transformers itself
    model.config.quantization_config = Mxfp4Config(modules_to_not_convert=list(NOT_CONVERTED))
    return model


def mark_initialized(model: nn.Module) -> None:
    """Tell transformers' `init_weights` to leave the native experts alone (it would look for the bf16 weights)."""
    for _, module in experts_modules(model):
        module._is_hf_initialized = True


@torch.no_grad()
def init_random_(model: nn.Module, std: float, seed: int) -> None:
    """Random MXFP4 experts of about `std` (`codec.fill_random_`, one seeded stream per tensor) and zero biases,
    marked initialised (`mark_initialized`). Draws nothing from torch's global generator, so it may run beside
    transformers' `init_weights` of the other parameters (posttrain.models.random_init does)."""
    mark_initialized(model)
    for layer, (_, module) in enumerate(experts_modules(model)):
        for k, proj in enumerate(PROJECTIONS):
            stream = ((seed % 2**31) * 1_000_003 + layer) * len(PROJECTIONS) + k  # one stream per tensor and seed
            fill_random_(getattr(module, f"{proj}_blocks"), getattr(module, f"{proj}_scales"), std, stream)
            getattr(module, f"{proj}_bias").zero_()


@torch.no_grad()
def dequantize_experts_(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """The inverse of `to_native`: bf16 (or `dtype`) expert parameters in transformers' [E, in, out] layout from the
    blocks and scales, the default experts implementation again. The same weights, exactly, in the `dequantize`
    mode's layout (what `Mxfp4Config(dequantize=True)` loads)."""
    for _, module in experts_modules(model):
        target = dtype or module.gate_up_proj_bias.dtype
        for proj in PROJECTIONS:
            blocks, scales = module._buffers.pop(f"{proj}_blocks"), module._buffers.pop(f"{proj}_scales")
            assert blocks is not None and scales is not None
            weight = torch.stack([dequantize(b, s, target) for b, s in zip(blocks, scales)]).transpose(1, 2)
            module.register_parameter(proj, nn.Parameter(weight.contiguous()))
            getattr(module, f"{proj}_bias").requires_grad_(True)
    model.set_experts_implementation(None)
    return model


def expert_bytes(model: nn.Module) -> dict[str, Any]:
    """Bytes of the experts' MXFP4 tensors and of everything else (for logs and tests)."""
    experts = sum(b.numel() * b.element_size() for _, m in experts_modules(model) for b in m.buffers(recurse=False))
    total = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return {"experts": experts, "rest": total - experts}
