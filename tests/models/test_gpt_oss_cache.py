"""GPT-OSS sliding-window layers: cached generation matches a full no-cache forward, also past the window."""

from __future__ import annotations

import pytest
import torch

from posttrain.models import load


@pytest.fixture(scope="module")
def tiny_gpt_oss():
    from posttrain.config.compose import load_config

    cfg = load_config(["model=tiny_gpt_oss", "model.arch.initializer_range=0.2"])
    model, tok = load(cfg, with_lora=False)
    assert model.config.sliding_window == 4
    return model.eval(), tok


def test_cached_greedy_generation_matches_full_forward_past_the_window(tiny_gpt_oss):
    model, tok = tiny_gpt_oss
    prompt = tok("<|start|>user<|message|>hi<|end|><|start|>assistant", return_tensors="pt").input_ids
    calls: list[torch.Tensor] = []

    def record(module, args, kwargs):
        if kwargs.get("position_ids") is not None:
            calls.append(kwargs["position_ids"].clone())

    handle = model.model.register_forward_pre_hook(record, with_kwargs=True)
    n_new = 3 * model.config.sliding_window + 2
    with torch.no_grad():
        out = model.generate(
            prompt,
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            do_sample=False,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
    handle.remove()
    seq = out.sequences[0]
    assert len(out.logits) == n_new and seq.numel() == prompt.size(1) + n_new
    worst = 0.0
    with torch.no_grad():
        for k, step_logits in enumerate(out.logits):
            prefix = seq[: prompt.size(1) + k].unsqueeze(0)
            full = model(prefix, use_cache=False).logits[0, -1]
            worst = max(worst, float((full - step_logits[0]).abs().max()))
    assert worst <= 1e-4, worst
    # the window matters for this model: attending to the whole prefix would give other logits
    with torch.no_grad():
        windowed = model(seq.unsqueeze(0), use_cache=False).logits[0, -1]
        model.config.sliding_window = 10_000
        try:
            unwindowed = model(seq.unsqueeze(0), use_cache=False).logits[0, -1]
        finally:
            model.config.sliding_window = 4
    assert float((windowed - unwindowed).abs().max()) > 1e-3
    # one prefill call with the whole prompt, then exactly one new position per decode step
    assert calls and calls[0].shape[-1] == prompt.size(1)
    decode = calls[1:]
    assert len(decode) == n_new - 1
    assert all(p.shape[-1] == 1 for p in decode)
    assert [int(p[0, 0]) for p in decode] == list(range(prompt.size(1), prompt.size(1) + n_new - 1))


@pytest.mark.parametrize("experts", [False, True])
def test_bf16_forward_backward_with_lora_has_no_dtype_mismatch(compose, experts):
    cfg = compose("model=tiny_gpt_oss", "model.dtype=bfloat16", f"model.lora.experts={str(experts).lower()}")
    model, tok = load(cfg)
    ids = tok("<|start|>user<|message|>hello there<|end|>", return_tensors="pt").input_ids
    out = model(input_ids=ids, labels=ids)
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g.float()).all() for g in grads)
    assert any(float(g.float().abs().sum()) > 0 for g in grads)
