"""`attn_implementation="eager_thread_invariant"`: transformers' eager attention whose gradient does not depend on
the number of CPU threads, so that a seed trains to the same weights at one thread and at two (the counts tested).

ATen's CPU softmax backward (torch 2.13) splits its rows between threads in a way that changes how some rows are
summed: on SmolLM2's attention shapes (e.g. [4, 9, 46, 46]) one and two threads give gradients one bf16 ulp apart.
That was the only thread-dependent op of a GRPO step on hw=cpu (bf16 training, eager attention): with it replaced,
12 steps of the `make train` preset are bit-identical at one and two threads (experiments/grpo_objectives). The
backward here is the same formula written as tensor ops, each of which reduces a row in one fixed order.

Registered with transformers' `AttentionInterface` and `AttentionMaskInterface` (the eager mask) when
`posttrain.models` is imported; the forward is `eager_attention_forward` of Llama: the same keys, values, mask and
scaling, with the softmax below in place of `nn.functional.softmax(..., dtype=torch.float32)`.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.llama.modeling_llama import repeat_kv

NAME = "eager_thread_invariant"


class _Fp32Softmax(torch.autograd.Function):
    """`softmax(x, dim=-1, dtype=float32)` with the backward `y * (g - sum(g * y))` as plain tensor ops."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x, dim=-1, dtype=torch.float32)
        ctx.save_for_backward(y)
        ctx.input_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        grad = grad.float()
        return (y * (grad - (grad * y).sum(-1, keepdim=True))).to(ctx.input_dtype)


def fp32_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim in fp32 whose backward reduces each row in one order, whatever the thread count."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _Fp32Softmax.apply(x)
    return torch.softmax(x, dim=-1, dtype=torch.float32)


def eager_thread_invariant_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama's `eager_attention_forward` with `fp32_softmax`; refuses attention sinks (GPT-OSS's `s_aux`), which it
    does not implement."""
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"attn_implementation={NAME!r} has no attention sinks (GPT-OSS): use eager for this model")
    groups = int(module.num_key_value_groups)  # type: ignore[arg-type]  # LlamaAttention's int attribute
    key_states = repeat_kv(key, groups)
    value_states = repeat_kv(value, groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = fp32_softmax(attn_weights).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


def register() -> None:
    """Make `attn_implementation="eager_thread_invariant"` loadable (idempotent)."""
    AttentionInterface.register(NAME, eager_thread_invariant_attention)
    AttentionMaskInterface.register(NAME, eager_mask)
