"""`attn_implementation="eager_thread_invariant"`: Llama's eager attention, bit for bit forward, ATen's gradient up
to rounding, and a bf16 gradient that is the same at one and two CPU threads (ATen's is not on these shapes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

from posttrain.models import load
from posttrain.models.thread_invariant_attention import NAME, eager_thread_invariant_attention, fp32_softmax

# SmolLM2-135M's heads (9 query, 3 key/value) and the make-train preset's prompt pass: 4 prompts of 46 tokens
HEADS, KV_HEADS, DIM = 9, 3, 64


def _inputs(batch: int, seq: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, seq, DIM, generator=g).to(dtype).requires_grad_()
    k = torch.randn(batch, KV_HEADS, seq, DIM, generator=g).to(dtype).requires_grad_()
    v = torch.randn(batch, KV_HEADS, seq, DIM, generator=g).to(dtype).requires_grad_()
    causal = torch.full((seq, seq), torch.finfo(dtype).min).triu(1).to(dtype)
    mask = causal.expand(batch, 1, seq, seq).clone()
    mask[0, :, :, :3] = torch.finfo(dtype).min  # a left-padded row: its first 3 keys masked
    mask[0, :, :3, :3] = 0.0  # (its padded queries see the padding, as transformers' eager mask leaves them)
    grad_out = torch.randn(batch, seq, HEADS, DIM, generator=g).to(dtype)
    return q, k, v, mask, grad_out


@contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `n` (None: unchanged) for the block, then restored."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _attend(fn, inputs, threads: int | None = None):
    q, k, v, mask, grad_out = inputs
    with _threads(threads):
        for t in (q, k, v):
            t.grad = None
        module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, training=False)
        out, weights = fn(module, q, k, v, mask, scaling=DIM**-0.5)
        out.backward(grad_out)
        return out.detach(), weights.detach(), [t.grad.clone() for t in (q, k, v)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_is_llamas_eager_and_gradient_its_up_to_rounding(dtype):
    inputs = _inputs(2, 23, dtype)
    out, weights, grads = _attend(eager_thread_invariant_attention, inputs)
    ref_out, ref_weights, ref_grads = _attend(eager_attention_forward, inputs)
    assert torch.equal(out, ref_out) and torch.equal(weights, ref_weights)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-3}
    for got, want in zip(grads, ref_grads):
        assert got.abs().max() > 0
        torch.testing.assert_close(got, want, **tol)


def _softmax_grad(softmax, threads: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    # bf16 attention scores of the preset's prompt pass (4 prompts x 9 heads x 46 x 46), as ATen's test case
    x = torch.randn(4, HEADS, 46, 46, generator=g).to(torch.bfloat16).requires_grad_()
    grad = torch.randn(4, HEADS, 46, 46, generator=g)
    with _threads(threads):
        softmax(x).backward(grad)
    return x.grad


def test_bf16_gradient_is_the_same_at_one_and_two_threads():
    assert torch.equal(_softmax_grad(fp32_softmax, 1), _softmax_grad(fp32_softmax, 2))
    inputs = _inputs(4, 46, torch.bfloat16)
    one = _attend(eager_thread_invariant_attention, inputs, threads=1)[2]
    two = _attend(eager_thread_invariant_attention, inputs, threads=2)[2]
    assert all(torch.equal(a, b) for a, b in zip(one, two))

    # why the module exists: ATen's softmax backward (torch 2.13) splits these rows between two threads so that some
    # are summed in another order. When a torch release makes these equal, hw=cpu can go back to plain eager.
    def aten(x):
        return torch.softmax(x, dim=-1, dtype=torch.float32)

    assert not torch.equal(_softmax_grad(aten, 1), _softmax_grad(aten, 2))


def test_a_model_loads_with_it_and_matches_eager(compose):
    """Through posttrain's loader (which registers the name): the same logits as eager, and gradients up to rounding."""
    torch.manual_seed(0)
    ids = torch.randint(0, 200, (2, 12))
    results = []
    for impl in ("eager", NAME):
        model, _ = load(compose("model=tiny_llama", f"model.attn_implementation={impl}"), with_lora=False)
        assert model.config._attn_implementation == impl
        logits = model(input_ids=ids).logits
        logits.float().logsumexp(-1).sum().backward()
        results.append((logits.detach(), model.model.layers[0].self_attn.q_proj.weight.grad.clone()))
    (eager_logits, eager_grad), (logits, grad) = results
    assert torch.equal(logits, eager_logits)
    assert grad.abs().max() > 0
    torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=1e-6)


def test_refuses_attention_sinks():
    """GPT-OSS passes its sinks as `s_aux`; ignoring them would silently run another model."""
    q, k, v, mask, _ = _inputs(1, 5, torch.float32)
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, training=False)
    with pytest.raises(ValueError, match="sinks"):
        eager_thread_invariant_attention(module, q, k, v, mask, scaling=1.0, s_aux=torch.zeros(HEADS))
