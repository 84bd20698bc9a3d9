"""Parameter counts come from the model config (meta-device build), not from names."""

from __future__ import annotations

import pytest

from posttrain.hardware import count_params

PUBLISHED = {  # total, active (None: dense)
    "gpt_oss": (20.9e9, 3.6e9),
    "llama3_2_1b": (1.24e9, None),
    "llama3_2_3b": (3.21e9, None),
    "llama3_1_8b": (8.03e9, None),
    "smollm2_135m": (134.5e6, None),
}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_counts_within_one_percent_of_published(compose, model):
    counts = count_params(compose(f"model={model}"))
    total, active = PUBLISHED[model]
    assert abs(counts.total / total - 1) < 0.01, counts.total
    if active is not None:
        assert abs(counts.active / active - 1) < 0.01, counts.active


def test_moe_active_counts_k_of_e_experts(compose):
    cfg = compose("model=tiny_gpt_oss")
    c = count_params(cfg)
    k, e = cfg.model.arch.num_experts_per_tok, cfg.model.arch.num_local_experts
    assert c.experts > 0
    # active = everything but the untied input embedding, with experts scaled by k/E
    assert c.active == round(c.total - c.embedding - c.experts + c.experts * k / e)
    # a name that is not in any table still counts: change the numbers, the count follows
    bigger = count_params(compose("model=tiny_gpt_oss", "model.arch.num_local_experts=8", "model.name=unknown"))
    assert bigger.experts == 2 * c.experts


def test_dense_tied_active_equals_total(compose):
    c = count_params(compose("model=llama3_2_1b"))
    assert c.lm_head == 0 and c.active == c.total


def test_lora_trainable_matches_shapes(compose):
    cfg = compose("model=llama3_2_1b")
    a = cfg.model.arch
    r, h, hd = cfg.model.lora.r, a.hidden_size, a.head_dim
    q, kv = a.num_attention_heads * hd, a.num_key_value_heads * hd
    per_layer = r * ((h + q) + 2 * (h + kv) + (q + h))  # q, k, v, o
    c = count_params(cfg)
    assert c.trainable == a.num_hidden_layers * per_layer
    assert c.trainable_bytes == 4 * c.trainable  # PEFT keeps adapters in fp32 on a bf16 base


def test_expert_lora_adds_trainable(compose):
    attn = count_params(compose("model=tiny_gpt_oss"))
    experts = count_params(compose("model=tiny_gpt_oss", "model.lora.experts=true"))
    assert experts.trainable > attn.trainable
    full = count_params(compose("model=tiny_gpt_oss", "model.lora.enabled=false"))
    assert full.trainable == full.total and full.adapters == 0


@pytest.mark.parametrize("train", ["lora", "full"])
def test_native_mxfp4_counts_experts_at_17_bytes_per_32_and_never_trainable(compose, train):
    common = ("model=gpt_oss", f"model.lora.enabled={train == 'lora'}")
    dense = count_params(compose(*common))
    native = count_params(compose(*common, "model.mxfp4=native"))
    assert native.total == dense.total and native.active == dense.active  # the same model, each weight once
    expert_weights = 24 * 32 * 3 * 2880 * 2880  # gate_up [5760, 2880] + down [2880, 2880] per expert
    assert native.mxfp4_bytes == expert_weights * 17 // 32 and dense.mxfp4_bytes == 0
    assert dense.weight_bytes - native.weight_bytes == expert_weights * 2 - native.mxfp4_bytes
    if train == "full":  # the experts' weights (and their frozen biases) drop out of what trains
        expert_biases = 24 * 32 * (5760 + 2880)
        assert dense.trainable - native.trainable == expert_weights + expert_biases
    else:
        assert native.trainable == dense.trainable
