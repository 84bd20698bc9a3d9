"""Models: tiny offline builds, real checkpoints by hub name, LoRA; `load(cfg) -> (model, tokenizer)`."""

from posttrain.models.loader import attn_implementation, hf_config, load, load_kwargs, torch_dtype

__all__ = ["attn_implementation", "hf_config", "load", "load_kwargs", "torch_dtype"]
