"""The `model` group against the installed libraries, before any weights load or build: the architecture numbers
against the family's transformers config class (known keys, positive sizes, the class's own checks), the attention
implementation against transformers' registry and the package it needs, the chat template against transformers'
Jinja compiler, and, once the model is built (the memory plan's meta model, or the real one), LoRA target
names against its modules. Each problem is one `ConfigError` line instead of a traceback from deep in a library.
"""

from __future__ import annotations

import difflib
import importlib.util
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posttrain.errors import ConfigError

FAMILY_CONFIG = {"llama": "LlamaConfig", "gpt_oss": "GptOssConfig"}
# architecture numbers that count something: 0 or less builds no model
COUNTS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "head_dim",
    "num_local_experts",
    "num_experts_per_tok",
    "max_position_embeddings",
)
# attention implementations that need a package of their own (transformers registers them regardless)
NEEDS_PACKAGE = {
    "flash_attention_2": "flash_attn",
    "flash_attention_3": "flash_attn_interface",
    "flash_attention_4": "flash_attn.cute",
}


def check_arch(model_cfg: DictConfig) -> None:
    """`model.arch` keys the family's config class has, counts > 0, and the class's own validation."""
    import transformers

    cls = getattr(transformers, FAMILY_CONFIG[str(model_cfg.family)])
    arch: dict[str, Any] = OmegaConf.to_container(model_cfg.arch, resolve=True)  # type: ignore[assignment]
    default = cls().to_dict()
    # and the legacy top-level RoPE keys transformers folds into rope_parameters (rope_theta, rope_scaling)
    known = {*default, *(default.get("rope_parameters") or {}), "rope_scaling"}
    for key, value in arch.items():
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean model.arch.{close[0]}?)" if close else ""
            raise ConfigError(f"model.arch.{key}: {cls.__name__} has no such field{hint}")
        if key in COUNTS and isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            raise ConfigError(f"model.arch.{key}={value} must be > 0")
    heads, kv = arch.get("num_attention_heads"), arch.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise ConfigError(f"model.arch.num_key_value_heads={kv} must divide num_attention_heads={heads}")
    try:
        cls(**arch)
    except Exception as ex:  # ValueError, TypeError, or huggingface_hub's validation error wrapping one
        last = [line.strip() for line in str(ex).splitlines() if line.strip()][-1]
        raise ConfigError(f"model.arch: {cls.__name__} refuses it: {last}") from None


def check_attention(model_cfg: DictConfig, device: str) -> None:
    """`model.attn_implementation` is eager or registered with transformers, and its package is installed."""
    impl = model_cfg.attn_implementation
    if not impl or "/" in str(impl):  # null: per family; `org/repo`: a kernel from the hub (transformers' kernels)
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from posttrain.models.thread_invariant_attention import register

    register()  # posttrain's own implementation (idempotent), as the loader does

    valid = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    if impl not in valid:
        raise ConfigError(f"model.attn_implementation={impl!r} is not one of {', '.join(valid)}")
    package = NEEDS_PACKAGE.get(str(impl))
    if package is None:
        return
    if device != "cuda":
        raise ConfigError(f"model.attn_implementation={impl} runs on CUDA only, not hw.device={device} (use sdpa)")
    top = package.split(".")[0]
    if importlib.util.find_spec(top) is None:
        raise ConfigError(f"model.attn_implementation={impl} needs the {top} package, which is not installed")


def check_chat_template(model_cfg: DictConfig) -> None:
    """`model.chat_template` compiles as transformers compiles it (a Jinja syntax error was a traceback at the
    first prompt)."""
    from jinja2 import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from posttrain.paths import CHAT_TEMPLATE_DIR

    name = str(model_cfg.chat_template)
    path = CHAT_TEMPLATE_DIR / name
    if not path.is_file():
        return  # a missing file is the path check's (config.fields)
    try:
        _compile_jinja_template(path.read_text())
    except TemplateError as ex:
        line = getattr(ex, "lineno", None)
        raise ConfigError(f"model.chat_template={name}: {'line ' + str(line) + ': ' if line else ''}{ex}") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_model_files(model_cfg: DictConfig, reads_files: bool = True) -> None:
    """A tiny (random) model given files it would ignore; a `model.path` directory whose config.json does not parse
    or that has no tokenizer (each was a traceback from transformers after the run dir was made)."""
    import json
    from pathlib import Path

    path, gguf = model_cfg.get("path"), model_cfg.get("gguf_file")
    if model_cfg.get("tiny") and (path or gguf):
        key = "model.gguf_file" if gguf else "model.path"
        raise ConfigError(
            f"{key} is ignored by model={model_cfg.name} (model.tiny=true builds a random model): give it with a real "
            "model's config, e.g. model=smollm2_135m"
        )
    if not reads_files or not path or gguf:  # a GGUF file is checked when it is converted (models.fetch)
        return
    local = Path(path).expanduser()
    config = local / "config.json"
    if not config.is_file():
        raise ConfigError(f"model.path={path}: not a model directory (no config.json)")
    try:
        json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as ex:
        raise ConfigError(f"model.path={path}: config.json does not parse ({ex})") from None
    if not any((local / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"model.path={path}: no tokenizer ({', '.join(TOKENIZER_FILES)}: none there)")


def check_lora_targets(model: Any, model_cfg: DictConfig) -> None:
    """Every `model.lora.target_modules` name matches a module of `model` (PEFT matches by the name's last parts)."""
    names = {name for name, _ in model.named_modules() if name}
    leaves = {name.rsplit(".", 1)[-1] for name in names}
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if type(m).__name__ == "Linear"})
    for target in model_cfg.lora.target_modules:
        if target in leaves or any(name.endswith(f".{target}") for name in names):
            continue
        raise ConfigError(
            f"model.lora.target_modules: {target!r} names no module of this {model_cfg.family} model; "
            f"its linear layers: {', '.join(linear)}"
        )
