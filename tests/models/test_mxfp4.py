"""Native MXFP4 experts (`model.mxfp4=native`) against the dequantized ones, the codec against transformers', and the
real checkpoint format loading offline in both modes.

Bounds: the two modes hold the same weights exactly (the dequantize mode's bf16 experts are the blocks decoded), so
what can differ is where floating-point sums round: per-expert `F.linear` with its bias fused against transformers'
`grouped_mm` followed by a bias add. In fp32 logits agree to 1e-5 of their largest magnitude; in bf16 to one bf16
unit in the last place of it (2^-7 relative: two paths that each round once can land one ulp apart), and so do the
LoRA gradients (fp32: 1e-5). Measured: bf16 logits and gradients bit-equal, fp32 2.4e-7 of 0.65; the CUDA path's
grouped GEMM against the loop, one expert layer in bf16: one ulp (0.00195 at 0.33).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers.integrations.mxfp4 import _convert_moe_packed_tensors

from posttrain.models import load
from posttrain.models.mxfp4 import codec
from posttrain.models.mxfp4.experts import NATIVE, experts_modules, is_native

TINY = ("model=tiny_gpt_oss", "model.quantization=mxfp4", "model.arch.initializer_range=0.2")
BF16_ULP = 2.0**-7  # relative: one unit in the last place of the largest magnitude


def _all_bytes(experts: int = 2, rows: int = 8, groups: int = 3, seed: int = 0):
    """Blocks holding every byte value and scales across the range real checkpoints use (2^-27 .. 2^+8)."""
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (experts, rows, groups, 16), generator=g, dtype=torch.uint8)
    blocks.view(-1)[:256] = torch.arange(256, dtype=torch.uint8)
    scales = torch.randint(100, 136, (experts, rows, groups), generator=g, dtype=torch.uint8)
    return blocks, scales


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dequantize_is_bit_equal_to_transformers(dtype):
    blocks, scales = _all_bytes()
    reference = _convert_moe_packed_tensors(blocks, scales, dtype=dtype).transpose(1, 2)  # back to [E, out, in]
    assert torch.equal(codec.dequantize(blocks, scales, dtype), reference)


def test_compiled_cpu_dequantize_equals_the_eager_lookup():
    blocks, scales = _all_bytes(experts=1, rows=1 << 10, groups=2)  # 65,536 values
    assert blocks.numel() * 2 >= 1 << 16
    before = codec.COMPILE_MIN_NUMEL
    codec.COMPILE_MIN_NUMEL = 1 << 16
    try:
        compiled = codec.dequantize(blocks, scales)
    finally:
        codec.COMPILE_MIN_NUMEL = before
    eager = codec._lookup_into(blocks, scales, codec._table(blocks.device), codec._empty(blocks, torch.bfloat16))
    assert torch.equal(compiled, eager)


def test_quantize_inverts_dequantize_and_rounds_to_nearest():
    blocks, scales = _all_bytes()
    weights = codec.dequantize(blocks, scales, torch.float32)
    b2, s2 = codec.quantize(weights)
    assert torch.equal(codec.dequantize(b2, s2, torch.float32), weights)
    x = torch.tensor([[0.24, 0.26, 2.4, 2.6, 5.1, -4.9, 0.74] + [0.0] * 25])  # amax 5.1: scale 1
    b, s = codec.quantize(x)
    assert s.item() == 127
    assert codec.dequantize(b, s, torch.float32)[0, :7].tolist() == [0.0, 0.5, 2.0, 3.0, 6.0, -4.0, 0.5]


def test_random_blocks_have_the_requested_std():
    blocks = torch.empty(4, 256, 8, 16, dtype=torch.uint8)
    scales = torch.empty(4, 256, 8, dtype=torch.uint8)
    codec.fill_random_(blocks, scales, 0.02, seed=0)
    w = codec.dequantize(blocks, scales, torch.float32)
    assert abs(float(w.mean())) < 1e-3
    assert 0.016 < float(w.std()) < 0.025  # the nearest power-of-two scale: 0.0229
    assert codec.scale_for_std(0.02) == 120


@pytest.mark.parametrize("size", [8 * 4096 + 5, 3])
def test_random_bytes_are_uniform_and_seeded(size):
    a = codec.random_bytes_(torch.empty(size, dtype=torch.uint8), seed=7)
    assert torch.equal(a, codec.random_bytes_(torch.empty(size, dtype=torch.uint8), seed=7))
    assert not torch.equal(a, codec.random_bytes_(torch.empty(size, dtype=torch.uint8), seed=8))
    if size > 1000:
        counts = torch.bincount(a.long(), minlength=256).double()
        expected = size / 256
        assert float(((counts - expected) ** 2 / expected).sum()) < 255 + 5 * (2 * 255) ** 0.5  # chi-square, 5 sigma
        assert (a.view(-1)[: size // 8 * 8].view(-1, 8)[:, 7] >= 128).float().mean().sub(0.5).abs() < 0.03


@pytest.fixture(scope="module")
def pair():
    """The same tiny random GPT-OSS with native and with dequantized experts, fp32 and bf16, with LoRA."""
    from posttrain.config.compose import load_config

    models = {}
    for dtype in ("float32", "bfloat16"):
        for mode in ("native", "dequantize"):
            torch.manual_seed(0)
            cfg = load_config([*TINY, f"model.mxfp4={mode}", f"model.dtype={dtype}"])
            models[dtype, mode] = load(cfg)
    return models


def test_native_holds_blocks_and_dispatches_through_the_experts_interface(pair):
    native, _ = pair["float32", "native"]
    dense, _ = pair["float32", "dequantize"]
    base = native.get_base_model()
    assert is_native(base) and not is_native(dense.get_base_model())
    assert base.config._experts_implementation == NATIVE
    for _, experts in experts_modules(base):
        assert experts.gate_up_proj_blocks.dtype == torch.uint8 and experts.gate_up_proj_blocks.shape == (4, 128, 2, 16)
        assert not hasattr(experts, "gate_up_proj") and not experts.gate_up_proj_bias.requires_grad
    assert all("experts" not in n for n, p in native.named_parameters() if p.requires_grad)  # LoRA on attention only
    state = base.state_dict()
    assert "model.layers.0.mlp.experts.down_proj_scales" in state  # the checkpoint's names


def _batch(tok):
    text = ["<|start|>user<|message|>what is 2+2?<|end|>", "<|start|>assistant<|message|>four, I think<|end|>"]
    return tok(text, return_tensors="pt", padding=True)


@pytest.mark.parametrize("dtype,logit_tol", [("float32", 1e-5), ("bfloat16", BF16_ULP)])
def test_native_logits_and_lora_gradients_match_dequantize(pair, dtype, logit_tol):
    grads, logits = {}, {}
    for mode in ("native", "dequantize"):
        model, tok = pair[dtype, mode]
        model.zero_grad()
        batch = _batch(tok)
        out = model(**batch).logits
        logits[mode] = out.detach().float()
        (out.float().log_softmax(-1)[..., 7].sum()).backward()
        grads[mode] = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    scale = logits["dequantize"].abs().max()
    assert (logits["native"] - logits["dequantize"]).abs().max() <= logit_tol * scale
    assert grads["native"].keys() == grads["dequantize"].keys() and grads["native"]
    grad_tol = 1e-5 if dtype == "float32" else BF16_ULP
    for name, g in grads["dequantize"].items():
        assert (grads["native"][name] - g).abs().max() <= grad_tol * g.abs().max() + 1e-12, name
    assert max(float(g.abs().max()) for g in grads["native"].values()) > 0  # gradients reach the adapters


def test_native_greedy_rollouts_equal_dequantize(pair):
    tokens = {}
    for mode in ("native", "dequantize"):
        model, tok = pair["bfloat16", mode]
        batch = _batch(tok)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=12,
                min_new_tokens=12,
                do_sample=False,
                use_cache=True,
                pad_token_id=tok.pad_token_id,
            )
        tokens[mode] = out[:, batch.input_ids.size(1) :]
    assert torch.equal(tokens["native"], tokens["dequantize"])
    assert len(set(tokens["native"][0].tolist())) > 1  # not a constant stream


@pytest.fixture(scope="module")
def real_format(tmp_path_factory):
    """A tiny checkpoint in gpt-oss-20b's format, written by saving a native model."""
    from posttrain.config.compose import load_config

    torch.manual_seed(0)
    model, tok = load(load_config([*TINY, "model.mxfp4=native", "model.dtype=bfloat16"]), with_lora=False)
    path = tmp_path_factory.mktemp("gpt_oss_mxfp4")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model, tok


def test_saved_checkpoint_has_the_real_mxfp4_format(real_format):
    from safetensors import safe_open

    path, _, _ = real_format
    config = json.loads((path / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "mxfp4"
    assert "lm_head" in config["quantization_config"]["modules_to_not_convert"]
    with safe_open(path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
        blocks = f.get_tensor("model.layers.1.mlp.experts.gate_up_proj_blocks")
        scales = f.get_tensor("model.layers.1.mlp.experts.down_proj_scales")
    assert blocks.dtype == torch.uint8 and blocks.shape == (4, 128, 2, 16)  # [E, 2 x intermediate, hidden / 32, 16]
    assert scales.dtype == torch.uint8 and scales.shape == (4, 64, 2)
    assert not any(k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj") for k in keys)


@pytest.mark.parametrize("mode", ["native", "dequantize"])
def test_real_format_checkpoint_loads_offline_in_both_modes(compose, real_format, mode):
    path, reference, tok = real_format
    cfg = compose("model=gpt_oss", f"model.path={path}", f"model.mxfp4={mode}", "model.arch.vocab_size=320", "hw=cpu")
    loaded, tok2 = load(cfg, with_lora=False)
    assert is_native(loaded) == (mode == "native")
    batch = _batch(tok2)
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, reference(**_batch(tok)).logits)


def test_native_on_a_checkpoint_without_mxfp4_is_one_line_error(compose, tmp_path):
    from posttrain.errors import ConfigError

    model, tok = load(compose("model=tiny_gpt_oss"), with_lora=False)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="not an MXFP4 checkpoint"):
        load(compose("model=gpt_oss", f"model.path={tmp_path}", "model.mxfp4=native", "hw=cpu"), with_lora=False)


def test_grouped_cuda_path_equals_the_loop_under_the_triton_interpreter():
    """The CUDA path (Triton dequantization of the routed experts + torch's grouped GEMM), run on the CPU by
    Triton's interpreter in a fresh process (TRITON_INTERPRET is read at Triton's import)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["dequant_equal"] and result["skipped_unrouted"]
    assert result["forward"] <= BF16_ULP * result["scale"]
    assert result["grad"] <= BF16_ULP * result["grad_scale"]


def _grouped_against_loop() -> dict:
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    from posttrain.kernels.mxfp4_dequant import dequantize_cuda
    from posttrain.models.mxfp4 import experts as native

    blocks, scales = _all_bytes(experts=4, rows=64, groups=2)
    dequant_equal = torch.equal(dequantize_cuda(blocks, scales, torch.bfloat16), codec.dequantize(blocks, scales))
    offsets = torch.tensor([3, 3, 7, 7], dtype=torch.int32)  # experts 1 and 3: no rows
    routed = dequantize_cuda(blocks, scales, torch.float32, offsets=offsets)
    full = codec.dequantize(blocks, scales, torch.float32)
    skipped = torch.equal(routed[0], full[0]) and torch.equal(routed[2], full[2])

    config = GptOssConfig(hidden_size=64, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2)
    module = GptOssExperts(config)
    for name in native.PROJECTIONS:
        module._parameters.pop(name)
    for name, shape in native.block_shapes(module).items():
        module.register_buffer(name, torch.empty(shape, dtype=torch.uint8))
    holder = torch.nn.Module()
    holder.experts = module
    native.init_random_(holder, 0.05, seed=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        module.gate_up_proj_bias.normal_(0, 0.05, generator=g)
        module.down_proj_bias.normal_(0, 0.05, generator=g)
    module.bfloat16()
    x = torch.randn(40, 64, generator=g).bfloat16().requires_grad_()
    index = torch.stack([torch.randperm(3, generator=g)[:2] for _ in range(40)])  # expert 3 never routed
    weights = torch.softmax(torch.randn(40, 2, generator=g), -1).bfloat16()
    upstream = torch.randn(40, 64, generator=g).bfloat16()
    results = []
    for forward in (native._loop_forward, native._grouped_forward):
        y = forward(module, x, index, weights)
        (grad,) = torch.autograd.grad((y.float() * upstream.float()).sum(), [x])
        results.append((y.float(), grad.float()))
    (y0, g0), (y1, g1) = results
    return {
        "dequant_equal": dequant_equal,
        "skipped_unrouted": skipped,
        "forward": float((y0 - y1).abs().max().detach()),
        "scale": float(y0.abs().max().detach()),
        "grad": float((g0 - g1).abs().max()),
        "grad_scale": float(g0.abs().max()),
    }


if __name__ == "__main__":
    print(json.dumps(_grouped_against_loop()))
