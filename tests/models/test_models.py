"""Tiny offline models keep the real architectures; real models get the right from_pretrained kwargs."""

from __future__ import annotations

import pytest
import torch
from omegaconf import open_dict
from transformers import BitsAndBytesConfig, GptOssForCausalLM, LlamaForCausalLM, Mxfp4Config

from posttrain.config.validate import ConfigError
from posttrain.models import hf_config, load, load_kwargs
from posttrain.models.loader import torch_dtype
from posttrain.models.tokenizer import SPECIAL_TOKENS


def test_tiny_llama_is_llama_with_llama3_tokens(compose):
    model, tok = load(compose("model=tiny_llama"), with_lora=False)
    assert isinstance(model, LlamaForCausalLM)
    for t in SPECIAL_TOKENS["llama"]:
        assert len(tok(t, add_special_tokens=False).input_ids) == 1, t
    assert tok.eos_token == "<|eot_id|>" and tok.padding_side == "left"
    text = "héllo wörld ∑ 12+3"
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


def test_tiny_gpt_oss_keeps_moe_sinks_and_sliding_window(compose):
    model, tok = load(compose("model=tiny_gpt_oss"), with_lora=False)
    assert isinstance(model, GptOssForCausalLM)
    c = model.config
    assert c.num_local_experts == 4 and c.num_experts_per_tok == 2 and c.sliding_window == 4
    assert c.layer_types == ["sliding_attention", "full_attention"] * 2
    assert c._attn_implementation == "eager" and c.use_cache is False
    layer = model.model.layers[0]
    assert layer.self_attn.sinks.shape == (c.num_attention_heads,)
    assert layer.mlp.experts.gate_up_proj.shape[0] == 4  # batched experts parameter
    for t in SPECIAL_TOKENS["gpt_oss"]:
        assert len(tok(t, add_special_tokens=False).input_ids) == 1, t
    assert tok.eos_token == "<|return|>"


def test_gpt_oss_load_kwargs_dequantize_mxfp4_eager_no_cache(compose):
    cfg = compose("model=gpt_oss")
    kw = load_kwargs(cfg.model, compose("model=gpt_oss", "hw=cpu").hw)
    assert isinstance(kw["quantization_config"], Mxfp4Config) and kw["quantization_config"].dequantize
    assert kw["attn_implementation"] == "eager" and kw["use_cache"] is False
    assert kw["dtype"] == torch.bfloat16


def test_gpt_oss_refuses_bitsandbytes_at_compose_and_load(compose):
    # MXFP4 checkpoints are dequantized to bf16, never combined with a bitsandbytes config: refused in one line
    # before any model loads, and again by load_kwargs for a config that skipped validation
    with pytest.raises(ConfigError, match="bitsandbytes") as err:
        compose("model=gpt_oss", "model.quantization=bnb4")
    assert "\n" not in str(err.value)
    cfg = compose("model=gpt_oss", "hw=cpu")
    with open_dict(cfg):
        cfg.model.quantization = "bnb4"
    with pytest.raises(ConfigError, match="bitsandbytes"):
        load_kwargs(cfg.model, cfg.hw)
    # other families may use it: NF4 weights, compute in the load dtype
    cfg = compose("model=llama3_2_1b", "model.quantization=bnb4")
    q = load_kwargs(cfg.model, cfg.hw)["quantization_config"]
    assert isinstance(q, BitsAndBytesConfig) and q.load_in_4bit and q.bnb_4bit_quant_type == "nf4"
    assert q.bnb_4bit_compute_dtype == torch_dtype(cfg.model, cfg.hw)


def test_llama_load_kwargs_use_sdpa(compose):
    cfg = compose("model=llama3_2_1b")
    kw = load_kwargs(cfg.model, cfg.hw)
    assert kw["attn_implementation"] == "sdpa" and "quantization_config" not in kw


def test_real_architectures_from_repo_numbers(compose):
    c = hf_config(compose("model=gpt_oss").model)
    assert (c.num_hidden_layers, c.num_local_experts, c.vocab_size, c.sliding_window) == (24, 32, 201088, 128)
    c = hf_config(compose("model=llama3_1_8b").model)
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size) == (32, 4096, 14336)


def test_lora_on_attention_by_default_experts_on_request(compose):
    model, _ = load(compose("model=tiny_gpt_oss"))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("self_attn" in n and "lora_" in n for n in trainable)
    model, _ = load(compose("model=tiny_gpt_oss", "model.lora.experts=true"))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("experts" in n for n in trainable)
    base = sum(p.numel() for n, p in model.named_parameters() if not p.requires_grad)
    assert base == sum(p.numel() for p in load(compose("model=tiny_gpt_oss"), with_lora=False)[0].parameters())


def test_eos_prior_sets_initial_stop_probability(compose):
    model, tok = load(compose("model=tiny_llama", "model.init_eos_prob=0.2"), with_lora=False)
    ids = tok("some prompt text to score", return_tensors="pt").input_ids
    p = model(ids).logits.softmax(-1)[0, :, tok.eos_token_id]
    assert 0.1 < float(p.mean()) < 0.3


def test_lm_head_gets_a_contiguous_input_so_generation_prefill_is_one_gemm(compose):
    """Prefill feeds the head `hidden[:, -1:]`; without grad torch's matmul cannot fold that view and broadcasts
    the [vocab, hidden] weight over the batch (`aten::bmm` on a batch x hidden x vocab copy). The loader's hook
    hands the head a contiguous input: one `mm`, the same logits."""
    from torch.profiler import profile

    model, _ = load(compose("model=tiny_llama"), with_lora=False)
    model = model.to(torch.bfloat16)
    hidden = torch.randn(4, 9, model.config.hidden_size, dtype=torch.bfloat16)
    last = hidden[:, -1:]
    assert not last.is_contiguous()
    head = model.get_output_embeddings()
    with torch.no_grad(), profile() as prof:
        out = head(last)
    ops = {e.key for e in prof.key_averages()}
    assert "aten::bmm" not in ops and "aten::mm" in ops
    with torch.no_grad():
        torch.testing.assert_close(out, torch.nn.functional.linear(last.contiguous(), head.weight), rtol=0, atol=0)
