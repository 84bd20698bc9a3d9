"""Write a tiny Llama checkpoint as a GGUF file the way llama.cpp's converter does (for the GGUF loader tests)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

GGUF_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (interleaved rotary halves); transformers undoes it on load."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(model: Any, tokenizer: Any, path: Path) -> Path:
    """`model` (LlamaForCausalLM, fp32) and its byte-level `tokenizer` as an F32 GGUF at `path`."""
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(c.rms_norm_eps))
    w.add_rope_dimension_count(c.head_dim)
    vocab = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    assert tokenizer.convert_tokens_to_ids(vocab) == list(range(len(vocab))) and len(vocab) < c.vocab_size
    # The embedding rows past the tokenizer are unused tokens, as in real vocabularies; the first is GPT-2's
    # `<|endoftext|>`, which transformers' GGUF tokenizer adds (as unk) when the file does not have it.
    filler = ["<|endoftext|>"] + [f"[PAD{i}]" for i in range(len(vocab) + 1, c.vocab_size)]
    special = set(tokenizer.all_special_tokens)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab + filler)
    w.add_token_types([3 if t in special else 1 for t in vocab] + [5] * len(filler))  # 5: unused
    w.add_token_scores([0.0] * c.vocab_size)  # no merges: transformers derives none from single-byte tokens
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not c.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(c.num_hidden_layers):
        for hf, name in GGUF_NAMES.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if name == "attn_q":
                t = _permute(t, c.num_attention_heads)
            elif name == "attn_k":
                t = _permute(t, c.num_key_value_heads)
            w.add_tensor(f"blk.{i}.{name}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_wheel(dest: Path, gguf_path: Path, name: str = "tiny_model", version: str = "0.1.0") -> Path:
    """A minimal pure-Python wheel `<name>-<version>-py3-none-any.whl` shipping `gguf_path` as `<name>/<file>`."""
    dist = f"{name}-{version}.dist-info"
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf_path, f"{name}/{gguf_path.name}")
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return wheel
