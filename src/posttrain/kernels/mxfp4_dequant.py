"""MXFP4 -> bf16 on a CUDA device: the Triton kernel behind `posttrain.models.mxfp4.codec.dequantize` there.

One program decodes `GROUPS` scale groups (32 values each, 16 bytes + 1 scale byte) of one expert: each nibble's
e2m1 value is rebuilt arithmetically (sign, two exponent bits, one mantissa bit), multiplied by 2^(scale - 127) in
fp32 (exact) and written in the output dtype, low nibble first. With `offsets` (the grouped GEMM's cumulative row
counts per expert), programs of experts no row is routed to mask every load and store off: a decode step
dequantizes only the experts its tokens use, with no host synchronisation (the counts stay on the device).

This is the "dequantize into a scratch buffer, then a grouped GEMM" design of issue 57
(posttrain.models.mxfp4.experts.Mxfp4GroupedLinear). It runs on CPU tensors under TRITON_INTERPRET=1 (the tests).
Triton is imported with this module, so callers import it only on a CUDA tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

GROUPS = 64  # scale groups per program: 2,048 values
INTERPRETER_GROUPS = 1024  # under TRITON_INTERPRET each program costs Python time


@triton.jit
def _e2m1(code):
    exponent = (code >> 1) & 3
    mantissa = (code & 1).to(tl.float32)
    magnitude = tl.where(exponent == 0, mantissa * 0.5, tl.exp2((exponent - 1).to(tl.float32)) * (1.0 + mantissa * 0.5))
    return tl.where((code & 8) != 0, -magnitude, magnitude)


@triton.jit
def _dequant_kernel(
    blocks_ptr,
    scales_ptr,
    out_ptr,
    offsets_ptr,
    groups_per_expert,
    HAS_OFFSETS: tl.constexpr,
    GROUPS: tl.constexpr,
):
    expert = tl.program_id(0)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    limit = groups_per_expert
    if HAS_OFFSETS:  # an expert no row is routed to: every load and store masked off
        end = tl.load(offsets_ptr + expert)
        start = tl.where(expert > 0, tl.load(offsets_ptr + tl.maximum(expert - 1, 0)), 0)
        limit = tl.where(end > start, groups_per_expert, 0)
    in_range = group < limit
    base = expert.to(tl.int64) * groups_per_expert + group
    scale = tl.exp2(tl.load(scales_ptr + base, mask=in_range, other=127).to(tl.float32) - 127.0)
    byte = tl.arange(0, 16)
    packed = tl.load(blocks_ptr + base[:, None] * 16 + byte[None, :], mask=in_range[:, None], other=0).to(tl.int32)
    low = _e2m1(packed & 15) * scale[:, None]
    high = _e2m1(packed >> 4) * scale[:, None]
    values = tl.reshape(tl.join(low, high), (GROUPS, 32))
    value = tl.arange(0, 32)
    tl.store(
        out_ptr + base[:, None] * 32 + value[None, :],
        values.to(out_ptr.dtype.element_ty),
        mask=in_range[:, None],
    )


def dequantize_cuda(
    blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """`codec.dequantize` on the device: [..., out, in] in `dtype`. With `offsets` (int32, one per expert along the
    first axis) the experts with no rows are left unwritten (the grouped GEMM never reads them)."""
    blocks, scales = blocks.contiguous(), scales.contiguous()
    experts = blocks.shape[0] if offsets is not None else 1
    groups_per_expert = scales.numel() // experts
    out = torch.empty(*blocks.shape[:-2], blocks.shape[-2] * 32, dtype=dtype, device=blocks.device)
    per_program = GROUPS if blocks.is_cuda else INTERPRETER_GROUPS
    grid = (experts, triton.cdiv(groups_per_expert, per_program))
    _dequant_kernel[grid](
        blocks,
        scales,
        out,
        offsets if offsets is not None else scales,
        groups_per_expert,
        HAS_OFFSETS=offsets is not None,
        GROUPS=per_program,
    )
    return out
