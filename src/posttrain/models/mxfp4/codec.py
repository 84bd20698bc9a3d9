"""The MXFP4 format of GPT-OSS checkpoints, as tensors: decode, encode and random draws.

A weight [out, in] is stored as `blocks` uint8 [out, in / 32, 16] and `scales` uint8 [out, in / 32]: each byte holds
two e2m1 values (low nibble first), each group of 32 values along `in` shares one e8m0 scale 2^(scale - 127). This is
the layout of the `*_blocks` / `*_scales` tensors in openai/gpt-oss-20b (the experts' [E, out, in] with the expert
axis in front), and `dequantize` is bit-equal to transformers' `convert_moe_packed_tensors` (before its transpose).

`dequantize` looks each nibble up in the 16 e2m1 values and multiplies by the power-of-two scale in fp32 (exact:
every product is a bf16 number for the scales real checkpoints use). On a CPU, for tensors of at least
`COMPILE_MIN_NUMEL` values, the lookup runs as one `torch.compile`d loop (inductor's C++ backend) that writes the
output and nothing else; tests/models/test_mxfp4.py checks it against transformers' `_convert_moe_packed_tensors`
bit for bit. On CUDA a Triton kernel
does it (posttrain.kernels.mxfp4_dequant).
"""

from __future__ import annotations

import math
from functools import cache

import torch

GROUP = 32  # values per scale
BYTES_PER_GROUP = GROUP // 2
BYTES_PER_VALUE = (BYTES_PER_GROUP + 1) / GROUP  # 16 bytes of values + 1 byte of scale per 32 values: 0.53125
SCALE_BIAS = 127
# e2m1 codes 0..15: sign bit 3, two exponent bits, one mantissa bit (OCP MX spec; transformers' FP4_VALUES)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
# the mean square of an e2m1 code drawn uniformly: random blocks of uniform bytes have std sqrt(this) * scale
E2M1_UNIFORM_RMS = math.sqrt(sum(v * v for v in E2M1_VALUES) / len(E2M1_VALUES))
COMPILE_MIN_NUMEL = 1 << 20
_SHIFTS = torch.tensor([0, 4] * BYTES_PER_GROUP, dtype=torch.uint8)  # low nibble, high nibble, ...


def _lookup_into(blocks: torch.Tensor, scales: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Each nibble looked up in `table` (E2M1_VALUES), times its group's scale in fp32 (exact), written into `out`
    [..., out, in] in its dtype, low nibble first. Written as one pointwise map over the output (each byte read for
    both of its values), which inductor compiles to a single loop with no intermediate: a `torch.stack` of the two
    halves made it materialise them (a 66 MB fp32 temporary per gpt-oss-20b expert, which glibc then kept)."""
    codes = (blocks.repeat_interleave(2, dim=-1) >> _SHIFTS.to(blocks.device)) & 15  # [..., G, 32]
    scale = torch.exp2(scales.float() - SCALE_BIAS).unsqueeze(-1)
    out.view(*blocks.shape[:-1], GROUP).copy_((table[codes.int()] * scale).to(out.dtype))
    return out


@cache
def _table(device: torch.device) -> torch.Tensor:
    return torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)


@cache
def _compiled_lookup():
    return torch.compile(_lookup_into, dynamic=False)


def _empty(blocks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(*blocks.shape[:-2], blocks.shape[-2] * GROUP, dtype=dtype, device=blocks.device)


def dequantize(
    blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Weights [..., out, in] in `dtype` from `blocks` [..., out, in/32, 16] and `scales` [..., out, in/32]; written
    into `out` (of that shape and dtype) when given: a scratch tensor reused call after call, so that a CPU run does
    not allocate and fault in a fresh weight for every routed expert (`posttrain.models.mxfp4.experts`)."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != BYTES_PER_GROUP:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not pair up")
    if blocks.device.type == "cuda":
        from posttrain.kernels.mxfp4_dequant import dequantize_cuda

        return dequantize_cuda(blocks, scales, dtype)
    if out is None:
        out = _empty(blocks, dtype)
    if torch.compiler.is_compiling():  # inside a compiled graph (a compiled decode step): traced as it is
        return _lookup_into(blocks, scales, torch.tensor(E2M1_VALUES, device=blocks.device), out)
    table = _table(blocks.device)
    if blocks.device.type == "cpu" and blocks.numel() * 2 >= COMPILE_MIN_NUMEL:
        return _compiled_lookup()(blocks, scales, table, out)
    return _lookup_into(blocks, scales, table, out)


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks, scales) of `weight` [..., out, in] (in a multiple of 32): per group the smallest power-of-two scale
    that keeps its largest magnitude within 6, each value rounded to the nearest e2m1 code (ties to the even code).
    Exact for weights that are MXFP4 values already (`quantize(dequantize(b, s))` gives b, s back up to the sign of
    zero and the scale of all-zero groups)."""
    if weight.shape[-1] % GROUP:
        raise ValueError(f"MXFP4 needs the input dimension to be a multiple of {GROUP}, got {weight.shape[-1]}")
    w = weight.float().reshape(*weight.shape[:-1], weight.shape[-1] // GROUP, GROUP)
    amax = w.abs().amax(-1)
    exponent = torch.where(amax > 0, torch.ceil(torch.log2(amax.clamp_min(1e-38) / 6.0)), torch.zeros_like(amax))
    exponent = exponent.clamp(-SCALE_BIAS, SCALE_BIAS)
    scaled = w / torch.exp2(exponent).unsqueeze(-1)
    magnitudes = torch.tensor(E2M1_VALUES[:8], device=w.device)
    # nearest magnitude, ties to the even code (the lower index of a tie has an even mantissa bit)
    distance = (scaled.abs().unsqueeze(-1) - magnitudes).abs()
    code = distance.argmin(-1).to(torch.uint8)  # argmin returns the first (even) index on ties
    code = code | ((scaled < 0).to(torch.uint8) << 3)
    code = code.reshape(*code.shape[:-1], BYTES_PER_GROUP, 2)
    blocks = code[..., 0] | (code[..., 1] << 4)
    return blocks.contiguous(), (exponent + SCALE_BIAS).to(torch.uint8).contiguous()


def scale_for_std(std: float) -> int:
    """The e8m0 scale byte whose uniform random blocks have the standard deviation closest to `std`."""
    return int(round(SCALE_BIAS + math.log2(std / E2M1_UNIFORM_RMS)))


def random_bytes_(out: torch.Tensor, seed: int, chunk: int = 1 << 23) -> torch.Tensor:
    """Fill a contiguous uint8 tensor with uniform random bytes drawn from `seed`, 8 at a time. On the CPU numpy's
    PCG64 `random_raw` (64 random bits per draw: gpt-oss-20b's 9.5 GiB of expert bytes in about 5 s, where torch's
    uint8 `random_(0, 256)` takes 39 s); elsewhere torch's generator on the device, each word `a ^ (b << 1)` of two
    int64 draws (`random_()` gives 63 uniform bits)."""
    flat = out.view(-1)
    whole = flat.numel() // 8 * 8
    words = flat[:whole].view(torch.int64)
    if out.device.type == "cpu":
        import numpy as np

        bits = np.random.PCG64(seed)
        target = words.numpy().view(np.uint64)
        for start in range(0, target.size, chunk):
            target[start : start + chunk] = bits.random_raw(min(chunk, target.size - start))
        if whole < flat.numel():
            flat[whole:] = torch.from_numpy(
                np.frombuffer(bits.random_raw(1).tobytes(), np.uint8)[: flat.numel() - whole]
            )
        return out
    generator = torch.Generator(device=out.device).manual_seed(seed)
    for part in words.split(chunk):
        part.random_(generator=generator)
        part.bitwise_xor_(torch.empty_like(part).random_(generator=generator) << 1)
    if whole < flat.numel():
        flat[whole:].random_(0, 256, generator=generator)
    return out


def fill_random_(blocks: torch.Tensor, scales: torch.Tensor, std: float, seed: int) -> None:
    """Random MXFP4 weights of about `std` in place: uniform random bytes (every e2m1 code equally likely, zero mean)
    and one scale for all (`scale_for_std`). No bf16 weights are formed."""
    random_bytes_(blocks, seed)
    scales.fill_(scale_for_std(std))
