"""`algo.generation.backend=bf16_copy`: GRPO samples from a bf16 copy of the policy (LoRA merged, oneDNN-packed
linears) that follows every optimizer step and never changes the policy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posttrain.algos.grpo.build import build_trainer
from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from posttrain.models import load
from posttrain.rollout.merged_copy import PackedLinear, RolloutCopy, packing_available

TINY = ["model=tiny_llama", "hw.precision=bf16", "trainer.progress_bar=false"]
needs_packing = pytest.mark.skipif(not packing_available(), reason="no oneDNN bf16 weight packing (torch build or CPU)")


def _policy(*overrides: str):
    model, _ = load(load_config([*TINY, *overrides]))
    return model


def _train_lora(policy: nn.Module, seed: int = 0) -> None:
    """What an optimizer step does to a LoRA policy: new adapter weights (B starts at zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _merged_logits(policy: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of the policy with its adapters merged into bf16 weights, computed without the copy."""
    import copy

    merged = copy.deepcopy(policy).merge_and_unload().to(torch.bfloat16)
    with torch.no_grad():
        return merged(input_ids=ids).logits.float()


@needs_packing
def test_packed_linear_matches_linear_exactly():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=True).to(torch.bfloat16)
    x = torch.randn(8, 3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(PackedLinear(linear)(x), linear(x))
        linear.weight.mul_(2)
        packed = PackedLinear(linear)
        linear.weight.mul_(0.5)  # the packed copy is a snapshot until `repack`
        assert not torch.equal(packed(x), linear(x))
        packed.repack()
        assert torch.equal(packed(x), linear(x))


def test_copy_follows_lora_training_and_leaves_the_policy_alone():
    policy = _policy()
    base_before = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" not in n}
    rollout = RolloutCopy(policy)
    assert all(p.dtype == torch.bfloat16 for p in rollout.model.parameters())
    assert not any("lora" in n for n, _ in rollout.model.named_modules())
    ids = torch.randint(3, 200, (2, 12))
    _train_lora(policy)
    with torch.no_grad():
        stale = rollout.model(input_ids=ids).logits.float()
    rollout.sync(policy)
    with torch.no_grad():
        synced = rollout.model(input_ids=ids).logits.float()
    expected = _merged_logits(policy, ids)
    assert (stale - expected).abs().max() > 0.05  # the adapters moved the logits ...
    torch.testing.assert_close(synced, expected, atol=0.05, rtol=0.02)  # ... and the copy followed (bf16 rounding)
    for name, p in policy.named_parameters():  # merging never touched the policy's own weights
        if "lora_" not in name:
            assert torch.equal(p, base_before[name]), name


def test_copy_follows_full_finetuning_including_a_tied_head():
    policy = _policy("model.lora.enabled=false", "model.arch.tie_word_embeddings=true")
    rollout = RolloutCopy(policy)
    with torch.no_grad():
        policy.get_input_embeddings().weight.add_(0.1)
    rollout.sync(policy)
    emb = rollout.model.get_input_embeddings().weight
    assert torch.equal(emb, policy.get_input_embeddings().weight.to(torch.bfloat16))
    ids = torch.randint(3, 200, (2, 7))
    with torch.no_grad():
        expected = policy.to(torch.bfloat16)(input_ids=ids).logits.float()
        got = rollout.model(input_ids=ids).logits.float()
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.02)  # the packed head was re-packed from the tie


def test_copy_runs_its_own_modules_when_accelerate_wrapped_the_policy_forward():
    """accelerate's mixed precision sets `model.forward` to a closure over the policy; a deepcopy keeps it."""
    policy = _policy("model.lora.enabled=false")
    calls = []
    original = policy.forward

    def wrapped(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    policy.forward = wrapped
    rollout = RolloutCopy(policy)
    with torch.no_grad():
        rollout.model(input_ids=torch.randint(3, 200, (1, 5)))
    assert calls == []


def test_grpo_generates_with_the_copy_synced_each_step(tmp_path):
    cfg = load_config(
        [
            *TINY,
            "algo.generation.backend=bf16_copy",
            "kernels=fused",
            "trainer.max_steps=2",
            "trainer.per_device_batch_size=4",
            "algo.trl.num_generations=2",
            "algo.trl.max_completion_length=4",
        ]
    )
    trainer = build_trainer(cfg, tmp_path, [])
    rollout = trainer.rollout.rollout_copy
    assert isinstance(rollout, RolloutCopy)
    calls = []
    generate = rollout.model.generate
    rollout.model.generate = lambda *a, **k: calls.append(1) or generate(*a, **k)
    trainer.train()
    assert len(calls) == 2  # one generation round per optimizer step, both on the copy
    policy = trainer.accelerator.unwrap_model(trainer.model)
    # the copy holds the weights the second round sampled from: after the first step, not the second
    lora_b = next(p for n, p in policy.named_parameters() if "lora_B" in n)
    assert lora_b.abs().max() > 0 and trainer._rollout_step == 1
    rollout.sync(policy)
    ids = torch.randint(3, 200, (2, 6))
    with torch.no_grad():
        got = rollout.model(input_ids=ids).logits.float()
    torch.testing.assert_close(got, _merged_logits(policy, ids), atol=0.05, rtol=0.02)


def test_bf16_copy_is_cpu_only():
    with pytest.raises(ConfigError, match=r"backend=bf16_copy .* does not run on hw.device=cuda"):
        load_config([*TINY, "algo.generation.backend=bf16_copy", "hw=h200", "model=tiny_llama"])
