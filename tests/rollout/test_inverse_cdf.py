"""`algo.generation.sampler=inverse_cdf` (posttrain.rollout.inverse_cdf): one uniform per row drawn against the
cumulative distribution. It samples the distribution transformers' `torch.multinomial` samples (after the same
temperature / top-k / top-p / min-p warpers), never a token of probability zero, seeded; the sampler's recorded
log-probs stay the model's tempered ones; a backend that does not use a rollout copy refuses it."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from posttrain.config.compose import load_config
from posttrain.errors import ConfigError
from posttrain.models import load
from posttrain.rollout.engine import RolloutEngine
from posttrain.rollout.inverse_cdf import sample_inverse_cdf, warpers
from posttrain.rollout.merged_copy import RolloutCopy


def test_draws_follow_the_probabilities_and_skip_zeros():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]])  # any positive total
    g = torch.Generator().manual_seed(0)
    n = 40_000
    draws = torch.cat([sample_inverse_cdf(probs, g) for _ in range(n)], dim=1)  # [2, n]
    counts = torch.stack([torch.bincount(row, minlength=5) for row in draws]).float() / n
    assert counts[0, 1] == 0 and counts[0, 4] == 0 and counts[1].tolist() == [0, 0, 0, 0, 1]
    sigma = (probs[0] * (1 - probs[0]) / n).sqrt()
    assert ((counts[0] - probs[0]).abs() <= 4 * sigma + 1e-9).all()


def test_unsupported_warpers_are_refused():
    with pytest.raises(ValueError, match="typical_p"):
        warpers(GenerationConfig(do_sample=True, typical_p=0.9))


@pytest.fixture(scope="module")
def tiny():
    model, tok = load(load_config(["model=tiny_llama"]))
    return model.eval(), tok


def _engine(model, tok, sampler: str, *, stop: int | None = None, **kw) -> RolloutEngine:
    stop = tok.eos_token_id if stop is None else stop
    config = GenerationConfig(
        max_new_tokens=kw.pop("new", 1),
        min_new_tokens=kw.pop("min_new", 1),
        do_sample=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=[stop],
        disable_compile=True,
        **kw,
    )
    copy = RolloutCopy(model, dtype=torch.float32)
    return RolloutEngine(
        None,
        config,
        pad_token_id=tok.pad_token_id,
        eos_token_ids=[stop],
        rollout_copy=copy,
        sampler=sampler,
        name="bf16_copy",
    )


def test_first_tokens_have_multinomials_distribution(tiny):
    """4,000 first tokens of one prompt under each sampler, with every warper on: the same distribution (total
    variation within sampling noise) over the few tokens the warpers keep."""
    model, tok = tiny
    prompt = [tok("the quick brown fox", add_special_tokens=False).input_ids] * 4000
    kw = dict(temperature=0.7, top_k=8, top_p=0.95, min_p=0.01)
    counts = {}
    for sampler in ("multinomial", "inverse_cdf"):
        torch.manual_seed(1)
        ids = _engine(model, tok, sampler, **kw).generate(prompt)
        counts[sampler] = torch.bincount(torch.tensor([c[0] for c in ids]), minlength=model.config.vocab_size)
    kept = (counts["multinomial"] > 0) | (counts["inverse_cdf"] > 0)
    assert 2 <= int(kept.sum()) <= 8  # top_k=8 bounds the support, and the draw is not degenerate
    tv = 0.5 * (counts["multinomial"] - counts["inverse_cdf"]).abs().sum().item() / 4000
    assert tv < 0.04  # two samples of 4,000 from one distribution over <= 8 tokens: TV ~0.01-0.02
    assert not torch.equal(counts["multinomial"], counts["inverse_cdf"])  # another random stream


def test_seeded_and_logprobs_are_the_models(tiny):
    model, tok = tiny
    prompts = [tok(t, add_special_tokens=False).input_ids for t in ("hello there", "abc", "x y z")]
    # no min_new_tokens (it masks EOS in the recorded scores) and a stop token the random model does not favour
    stop = model.config.vocab_size - 1
    engine = _engine(model, tok, "inverse_cdf", stop=stop, new=8, min_new=0, temperature=0.7)
    torch.manual_seed(3)
    ids, logps = engine.generate_with_logprobs(prompts)
    torch.manual_seed(3)
    assert engine.generate(prompts) == ids and any(len(c) > 1 for c in ids)
    for prompt, completion, got in zip(prompts, ids, logps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(got), expected, atol=2e-5, rtol=1e-5)


def test_backends_without_a_copy_refuse_it():
    from posttrain.hardware import apply_profile

    with pytest.raises(ConfigError, match="vLLM samples itself"):
        load_config(["model=tiny_llama", "algo.generation.sampler=inverse_cdf", "algo.generation.backend=vllm"])
    tiny_on_cpu = load_config(["model=tiny_llama", "hw=cpu", "algo.generation.sampler=inverse_cdf"])
    with pytest.raises(ConfigError, match="rollout engine's sampler"):
        apply_profile(tiny_on_cpu)  # tiny random models keep sampling from the policy (backend hf)
    cfg = load_config(
        ["model=tiny_llama", "hw=cpu", "algo.generation.sampler=inverse_cdf", "algo.generation.backend=bf16_copy"]
    )
    apply_profile(cfg)
    assert cfg.algo.generation.sampler == "inverse_cdf" and cfg.algo.generation.backend == "bf16_copy"
