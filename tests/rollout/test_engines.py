"""Rollout engines sample what TRL's transformers path samples: greedy tokens equal to the dynamic cache's and to a
cache-free forward (GPT-OSS past its sliding window included), the same seeded samples, one compiled decode step."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from transformers import GenerationConfig

from posttrain.algos.grpo.policy_forward import causal_lm
from posttrain.config.compose import load_config
from posttrain.models import load
from posttrain.rollout.engine import RolloutEngine, left_pad, static_generation_config, until_first_eos
from posttrain.rollout.merged_copy import RolloutCopy

NEW = 12
TEXTS = [
    "hello there, how are you today?",
    "abc",
    "the quick brown fox jumps",
    "x y",
]  # longer and shorter than GPT-OSS's window


@pytest.fixture(scope="module", params=["tiny_llama", "tiny_gpt_oss"])
def tiny(request):
    model, tok = load(load_config([f"model={request.param}"]))
    model.eval()
    prompts = [tok(t, add_special_tokens=False).input_ids for t in TEXTS]
    return request.param, model, tok, prompts


def _config(tok, **kw) -> GenerationConfig:
    # min_new_tokens: the random models' EOS prior would end most rows after a token or two
    base = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, use_cache=True, disable_compile=True)
    return GenerationConfig(**{**base, "pad_token_id": tok.pad_token_id, "eos_token_id": [tok.eos_token_id], **kw})


def _engine(model, tok, config, **kw) -> RolloutEngine:
    kw.setdefault("eos_token_ids", [tok.eos_token_id])
    return RolloutEngine(model, config, pad_token_id=tok.pad_token_id, **kw)


def _static(model, tok, config, compile_backend: str | None = None, **kw) -> RolloutEngine:
    copy = RolloutCopy(model, dtype=torch.float32)
    gen = static_generation_config(config, compile_backend is not None, "cpu", compile_backend or "inductor")
    return _engine(None, tok, gen, rollout_copy=copy, static_cache_len=64, name="static", **kw)


def test_left_pad_and_first_eos_cut():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_token_id=0, multiple=4)
    assert ids.tolist() == [[0, 5, 6, 7], [0, 0, 0, 8]] and mask.tolist() == [[0, 1, 1, 1], [0, 0, 0, 1]]
    out = torch.tensor([[3, 9, 4, 9], [3, 3, 3, 3], [9, 0, 0, 0]])
    assert until_first_eos(out, [9]) == [[3, 9], [3, 3, 3, 3], [9]]


def test_static_cache_greedy_equals_dynamic_cache_and_full_forward(tiny):
    name, model, tok, prompts = tiny
    dynamic = _engine(model, tok, _config(tok)).generate(prompts)
    no_cache = _engine(model, tok, _config(tok, use_cache=False)).generate(prompts)
    static = _static(model, tok, _config(tok))
    got = static.generate(prompts)
    assert [len(c) for c in got] == [NEW] * len(prompts)
    assert got == dynamic == no_cache
    if name == "tiny_gpt_oss":  # the rollouts run past the sliding window of the sliding layers
        assert max(len(p) for p in prompts) + NEW > 2 * model.config.sliding_window
    # the cache is reused (reset) for the same batch size: a second call gives the same tokens for permuted prompts
    again = static.generate(prompts[::-1])
    assert again == got[::-1] and len(static._caches) == 1


def test_compiled_decode_step_compiles_once_and_keeps_the_tokens(tiny):
    """`torch.compile` of the decode step (aot_eager: dynamo + AOTAutograd, no codegen: the inductor run is in
    `python -m posttrain.bench generation --check`): one graph for every step and every prompt length."""
    import torch._dynamo

    name, model, tok, prompts = tiny
    torch._dynamo.reset()
    expected = _engine(model, tok, _config(tok)).generate(prompts)
    static = _static(model, tok, _config(tok), compile_backend="aot_eager")
    assert static.generate(prompts) == expected
    with torch._dynamo.config.patch(error_on_recompile=True):  # other prompt lengths, same decode-step shapes
        assert static.generate(prompts[1:] + prompts[:1]) == expected[1:] + expected[:1]
        assert static.generate([p[:2] for p in prompts]) == _engine(model, tok, _config(tok)).generate(
            [p[:2] for p in prompts]
        )


def test_seeded_sampling_draws_the_same_tokens(tiny):
    name, model, tok, prompts = tiny
    config = _config(tok, do_sample=True, temperature=0.7, top_p=0.9, top_k=0)
    torch.manual_seed(3)
    dynamic = _engine(model, tok, config).generate(prompts * 2)
    torch.manual_seed(3)
    static = _static(model, tok, config).generate(prompts * 2)
    assert static == dynamic
    assert len({tuple(c) for c in static}) > len(prompts)  # they are samples, not the greedy rows


def test_copy_sync_is_timed_and_follows_the_policy():
    model, tok = load(load_config(["model=tiny_llama"]))
    engine = _static(model, tok, _config(tok))
    prompts = [tok(t, add_special_tokens=False).input_ids for t in TEXTS]
    before = engine.generate(prompts)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    assert engine.generate(prompts) == before  # a snapshot until synced
    seconds = engine.sync(model)
    assert 0.0 < seconds < 5.0
    assert engine.generate(prompts) == _engine(model, tok, _config(tok)).generate(prompts) != before


def test_sampler_logprobs_are_the_models_tempered_logprobs_of_the_sampled_tokens(tiny):
    """What the trainer compares with the learner: log softmax(logits / T) at each sampled token, as a teacher-forced
    forward of the same weights computes it (fp32 copy: equal to rounding; top-p does not enter)."""
    name, model, tok, prompts = tiny
    stop = model.config.vocab_size - 1  # a stop token the random model does not favour (its EOS it does)
    config = _config(tok, do_sample=True, temperature=0.7, top_p=0.9, min_new_tokens=0, eos_token_id=[stop])
    torch.manual_seed(5)
    ids, logps = _static(model, tok, config, eos_token_ids=[stop]).generate_with_logprobs(prompts)
    assert [len(r) for r in logps] == [len(c) for c in ids] and any(len(c) > 1 for c in ids)
    for prompt, completion, got in zip(prompts, ids, logps):
        seq = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, len(prompt) - 1 : -1].float() / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(got), expected, atol=2e-5, rtol=1e-5)


@contextmanager
def _input_shapes(model) -> Iterator[list]:
    """The input_ids shape of every forward of `model` inside the block."""
    shapes: list = []
    hook = model.register_forward_pre_hook(lambda m, a, k: shapes.append(k["input_ids"].shape), with_kwargs=True)
    try:
        yield shapes
    finally:
        hook.remove()


def test_shared_prompt_prefill_keeps_the_tokens_and_logprobs(tiny):
    """Repeated prompts (GRPO's groups, in any order) prefilled once per distinct prompt: the greedy tokens of the
    plain prefill, and the sampler's log-probs of them to rounding; a batch without repeats takes the plain path."""
    name, model, tok, prompts = tiny
    batch = [prompts[i] for i in (0, 2, 0, 1, 2, 3, 0, 1)]
    lm = causal_lm(model)  # PEFT's generate calls the transformers model
    with _input_shapes(lm) as calls:
        shared_ids, shared_logps = _engine(model, tok, _config(tok)).generate_with_logprobs(batch)
    plain_ids, plain_logps = _engine(model, tok, _config(tok), share_prompts=False).generate_with_logprobs(batch)
    longest = max(len(p) for p in prompts)
    assert calls[0] == (4, longest - 1)  # the four distinct prompts, all but their last column
    assert calls[1] == (8, 1)  # then generate runs only the last prompt column of every row
    assert shared_ids == plain_ids and [len(c) for c in shared_ids] == [NEW] * len(batch)
    torch.testing.assert_close(torch.tensor(shared_logps), torch.tensor(plain_logps), atol=2e-5, rtol=1e-5)
    with _input_shapes(lm) as calls:
        distinct = _engine(model, tok, _config(tok)).generate(prompts)
    assert distinct == _engine(model, tok, _config(tok), share_prompts=False).generate(prompts)
    assert calls[0][1] == longest  # distinct prompts: one plain prefill of the whole prompt


@pytest.fixture(scope="module")
def native_gpt_oss():
    """Tiny GPT-OSS with native MXFP4 experts (model.mxfp4=native) and LoRA adapters that change its outputs."""
    model, tok = load(load_config(["model=tiny_gpt_oss", "model.quantization=mxfp4", "model.mxfp4=native", "seed=1"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    model.eval()
    return model, tok, [tok(t, add_special_tokens=False).input_ids for t in TEXTS]


def _policy_static(model, tok, config, compile_backend: str | None = None) -> RolloutEngine:
    gen = static_generation_config(config, compile_backend is not None, "cpu", compile_backend or "inductor")
    return _engine(model, tok, gen, static_cache_len=64, name="static_policy")


def test_static_policy_decodes_native_mxfp4_with_unmerged_lora_like_hf(native_gpt_oss):
    """`static_policy`: the policy itself (PEFT LoRA unmerged, MXFP4 experts) into a static cache, uncompiled and
    compiled, gives TRL's greedy tokens past the sliding window; the adapters are in play and nothing was merged."""
    import torch._dynamo
    from peft.tuners.lora import LoraLayer

    model, tok, prompts = native_gpt_oss
    assert max(len(p) for p in prompts) + NEW > 2 * model.config.sliding_window
    expected = _engine(model, tok, _config(tok)).generate(prompts)
    assert _engine(model, tok, _config(tok, use_cache=False)).generate(prompts) == expected
    assert _policy_static(model, tok, _config(tok)).generate(prompts) == expected
    torch._dynamo.reset()
    compiled = _policy_static(model, tok, _config(tok), compile_backend="aot_eager")
    assert compiled.generate(prompts) == expected
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert compiled.generate(prompts[::-1]) == expected[::-1]
    assert not any(layer.merged for layer in model.modules() if isinstance(layer, LoraLayer))
    with model.disable_adapter():
        assert _engine(model, tok, _config(tok)).generate(prompts) != expected  # the adapters change the tokens
    assert compiled.sync(model) == 0.0  # nothing to copy: it decodes from the policy
