"""`model.tiny=true` on real architectures: built on the meta device and initialised where it trains, with
transformers' init statistics, deterministic per seed; the small tiny models keep the weights they always had."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, GptOssForCausalLM, LlamaForCausalLM

from posttrain.hardware import apply_profile, plan
from posttrain.models import hf_config, load
from posttrain.models import random_init as random_init_mod
from posttrain.models.mxfp4 import codec
from posttrain.models.mxfp4.experts import expert_bytes
from posttrain.models.random_init import EAGER_MAX_PARAMS, num_params, random_init_model

# gpt-oss-20b's layer at depth 2 with 4 of its 32 experts and a short vocabulary: every parameter kind of the real
# architecture at its real width (258M parameters, over EAGER_MAX_PARAMS: the meta path), 0.5 GB in bf16
GPT_OSS_2_LAYERS = (
    "model=gpt_oss",
    "model.tiny=true",
    "model.arch.num_hidden_layers=2",
    "model.arch.layer_types=[sliding_attention,full_attention]",
    "model.arch.num_local_experts=4",
    "model.arch.vocab_size=1024",
)


def _check_init_statistics(model: torch.nn.Module, std: float, expert_std: float | None = None) -> dict[str, int]:
    """Every parameter as transformers initialises it: norms 1, biases 0, everything else N(0, std) (checked on an
    evenly strided sample of at most 2**18 entries: a tensor is initialised whole or not at all); expert weights
    with `expert_std` when given (MXFP4 draws). Uninitialised memory left by `to_empty` fails here. Returns how many
    tensors of each kind it checked."""
    kinds = {"norm": 0, "zero": 0, "normal": 0}
    for name, p in model.named_parameters():
        want = expert_std if expert_std and name.endswith(("experts.gate_up_proj", "experts.down_proj")) else std
        flat = p.detach().reshape(-1)
        x = flat[:: max(1, flat.numel() // 2**18)].float()
        if name.endswith("norm.weight"):
            assert torch.all(x == 1), name
            kinds["norm"] += 1
        elif name.endswith("bias") and "router" not in name:  # the router's bias is drawn like its weight
            assert torch.all(x == 0), name
            kinds["zero"] += 1
        else:
            assert torch.isfinite(x).all() and x.abs().max() < 8 * want, name
            if x.numel() >= 10_000:  # sample std within 2% of the init std, mean within 5 standard errors of 0
                assert abs(x.std().item() / want - 1) < 0.02, name
                assert abs(x.mean().item()) < 5 * want / x.numel() ** 0.5, name
            else:  # a sink per head, a router bias per expert: a few draws
                assert 0 < x.std().item() < 3 * std, name
            kinds["normal"] += 1
    return kinds


def test_small_models_keep_the_eager_weights_of_their_seed(compose):
    """Below EAGER_MAX_PARAMS the build is today's `from_config` under the seed on the CPU: bit-identical."""
    for name in ("tiny_llama", "tiny_gpt_oss"):
        cfg = compose(f"model={name}", "seed=3", "model.init_eos_prob=null")
        model, _ = load(cfg, with_lora=False)
        assert num_params(model) < EAGER_MAX_PARAMS
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            eager = AutoModelForCausalLM.from_config(model.config)
        for key, value in eager.state_dict().items():
            assert torch.equal(value, model.state_dict()[key]), (name, key)


@pytest.fixture(scope="module")
def llama_1b():
    """`model=llama3_2_1b model.tiny=true` through the loader (1.24B parameters, 2.5 GB in bf16: built once)."""
    from posttrain.config.compose import load_config

    cfg = load_config(["model=llama3_2_1b", "model.tiny=true", "model.init_eos_prob=null"])
    model, tok = load(cfg, with_lora=False)
    return model, tok


def test_llama_1b_arch_has_transformers_init(llama_1b):
    model, tok = llama_1b
    assert isinstance(model, LlamaForCausalLM) and model.device.type == "cpu"
    assert num_params(model) == 1_235_814_400 and model.dtype == torch.bfloat16  # the published 1.24B
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied
    # the embedding is drawn once: the tied head's draw would have overwritten the zeroed padding row
    assert torch.all(model.model.embed_tokens.weight[tok.pad_token_id] == 0)
    kinds = _check_init_statistics(model, std=model.config.initializer_range)
    assert kinds == {"norm": 2 * 16 + 1, "zero": 0, "normal": 1 + 7 * 16}
    # RoPE buffers (llama3 frequency scaling) recomputed on the device, as the module computes them in __init__
    rotary = model.model.rotary_emb
    fresh = type(rotary)(config=model.config)
    torch.testing.assert_close(rotary.inv_freq, fresh.inv_freq, rtol=0, atol=0)
    ids = tok("hello world", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits.float()
    assert torch.isfinite(logits).all() and logits.std() > 0


def test_gpt_oss_arch_experts_sinks_and_router_initialised():
    from posttrain.config.compose import load_config

    cfg = load_config([*GPT_OSS_2_LAYERS, "model.init_eos_prob=null"])
    model, _ = load(cfg, with_lora=False)
    assert isinstance(model, GptOssForCausalLM) and num_params(model) > EAGER_MAX_PARAMS
    layer = model.model.layers[0]
    assert layer.mlp.experts.gate_up_proj.shape == (4, 2880, 5760) and layer.self_attn.sinks.shape == (64,)
    assert model.lm_head.weight is not model.model.embed_tokens.weight  # untied in gpt-oss
    names = {n for n, _ in model.named_parameters()}
    for part in ("experts.gate_up_proj", "experts.down_proj", "self_attn.sinks", "router.weight", "router.bias"):
        assert any(part in n for n in names), part
    # GptOssConfig's initializer_range; the experts are MXFP4 draws (model=gpt_oss is an MXFP4 checkpoint)
    # dequantized: uniform e2m1 codes at the power-of-two scale nearest to it
    expert_std = codec.E2M1_UNIFORM_RMS * 2.0 ** (codec.scale_for_std(0.02) - codec.SCALE_BIAS)
    kinds = _check_init_statistics(model, std=0.02, expert_std=expert_std)
    # per layer: q/k/v/o and expert biases zero (6); sinks, router w+b, q/k/v/o, expert weights normal (9)
    assert kinds == {"norm": 2 * 2 + 1, "zero": 6 * 2, "normal": 2 + 9 * 2}
    expected = type(model.model.rotary_emb)(config=model.config).inv_freq
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, expected, rtol=0, atol=0)


def test_gpt_oss_arch_native_experts_are_drawn_as_mxfp4_blocks():
    """`model.mxfp4=native`: the experts are uint8 blocks and scales from the start (no bf16 expert weights are
    ever allocated), their values those of the dequantize mode's build of the same seed."""
    from posttrain.config.compose import load_config

    model, _ = load(load_config([*GPT_OSS_2_LAYERS, "model.mxfp4=native", "model.init_eos_prob=null"]), False)
    dense, _ = load(load_config([*GPT_OSS_2_LAYERS, "model.init_eos_prob=null"]), with_lora=False)
    for layer, dense_layer in zip(model.model.layers, dense.model.layers):
        experts = layer.mlp.experts
        assert (
            experts.gate_up_proj_blocks.shape == (4, 5760, 90, 16) and experts.gate_up_proj_blocks.dtype == torch.uint8
        )
        assert not hasattr(experts, "gate_up_proj")
        decoded = codec.dequantize(experts.down_proj_blocks[1], experts.down_proj_scales[1])
        assert torch.equal(decoded.t(), dense_layer.mlp.experts.down_proj[1])
    bytes_ = expert_bytes(model)
    assert bytes_["experts"] == 2 * 4 * 3 * 2880 * 2880 * codec.BYTES_PER_VALUE  # 0.53 bytes per expert weight


def test_meta_build_is_deterministic_per_seed(compose, monkeypatch):
    monkeypatch.setattr(random_init_mod, "EAGER_MAX_PARAMS", 0)  # the meta path for the small GPT-OSS
    config = hf_config(compose("model=tiny_gpt_oss").model)
    a, b, c = (random_init_model(config, torch.float32, "cpu", seed) for seed in (0, 0, 1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    drawn = [k for k in sa if sa[k].std() > 0]  # every random tensor differs under another seed
    assert len(drawn) >= 4 * 7 + 2 and not any(torch.equal(sa[k], sc[k]) for k in drawn)
    # the global RNG is left as it was
    state = torch.random.get_rng_state()
    random_init_model(config, torch.float32, "cpu", 5)
    assert torch.equal(state, torch.random.get_rng_state())


def test_eos_prior_on_a_meta_built_model(compose, monkeypatch):
    monkeypatch.setattr(random_init_mod, "EAGER_MAX_PARAMS", 0)
    model, tok = load(compose("model=tiny_llama", "model.init_eos_prob=0.2"), with_lora=False)
    ids = tok("some prompt text to score", return_tensors="pt").input_ids
    with torch.no_grad():
        p = model(ids).logits.softmax(-1)[0, :, tok.eos_token_id]
    assert 0.1 < float(p.mean()) < 0.3


def test_full_size_tiny_models_plan_like_the_real_ones(compose):
    # hub data (data=gsm8k): the plan uses the config's length bounds for both; with data=length it measures the
    # prompts with the tiny model's byte tokenizer, which the real model's tokenizer would not give
    for overrides in (("model=gpt_oss", "hw=h200", "data=gsm8k"), ("model=llama3_2_1b", "hw=a100", "data=gsm8k")):
        real, tiny = compose(*overrides), compose(*overrides, "model.tiny=true")
        apply_profile(real, overrides=set())
        apply_profile(tiny, overrides=set())
        assert plan(tiny).peak_bytes == plan(real).peak_bytes and plan(tiny).fits
