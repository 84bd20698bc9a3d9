"""Checkpoints in GPT-OSS's real MXFP4 format, loaded with the experts kept MXFP4, offline and without hub kernels.

The format is openai/gpt-oss-20b's: safetensors with `model.layers.N.mlp.experts.{gate_up,down}_proj_{blocks,scales}`
(uint8) beside bf16 everything else, and `"quantization_config": {"quant_method": "mxfp4", ...}` in config.json.
transformers loads it two ways: dequantized (`Mxfp4Config(dequantize=True)`: bf16 experts, what `model.mxfp4=dequantize`
uses) or through hub-fetched Triton kernels that only run forward. `load_native` is the third: a quantizer registered
with transformers (`register_quantizer`, the library's seam for weights stored unlike the module's parameters) turns
the freshly built model's experts native (`experts.to_native`) before the weights load, so the checkpoint's
blocks and scales load as they are into the experts' buffers and the rest as usual (`from_pretrained` does the
sharding, dtype, device placement and tied weights). Saving a native model (`save_pretrained`) writes the same
format back, so its checkpoints load in either mode, in transformers itself too.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel
from transformers.quantizers import HfQuantizer, register_quantization_config, register_quantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from posttrain.models.mxfp4.experts import NATIVE, NOT_CONVERTED, experts_modules, to_native

METHOD = "posttrain_mxfp4_native"


@register_quantization_config(METHOD)
class NativeMxfp4Config(QuantizationConfigMixin):
    """Loading option: keep the checkpoint's MXFP4 experts (written back as the checkpoint's own `mxfp4` config)."""

    def __init__(self, modules_to_not_convert: list[str] | None = None, **kwargs: Any):
        self.quant_method = METHOD  # type: ignore[assignment]
        self.modules_to_not_convert = modules_to_not_convert or list(NOT_CONVERTED)

    def to_dict(self) -> dict[str, Any]:
        return {"quant_method": "mxfp4", "modules_to_not_convert": self.modules_to_not_convert}


@register_quantizer(METHOD)
class NativeMxfp4Quantizer(HfQuantizer):
    """Builds the experts native before loading; nothing is quantized (the checkpoint is already MXFP4)."""

    requires_calibration = False

    def validate_environment(self, *args: Any, **kwargs: Any) -> None:
        return None

    def param_needs_quantization(self, model: PreTrainedModel, param_name: str, **kwargs: Any) -> bool:
        return False

    def _process_model_before_weight_loading(self, model: PreTrainedModel, **kwargs: Any) -> None:
        to_native(model)
        for _, experts in experts_modules(model):
            # the checkpoint supplies every expert tensor (`load_native` refuses missing ones); transformers' own
            # init of this module would look for the bf16 weights
            experts._is_hf_initialized = True

    def _process_model_after_weight_loading(self, model: PreTrainedModel, **kwargs: Any) -> PreTrainedModel:
        return model

    def is_serializable(self) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return True

    @property
    def is_qat_trainable(self) -> bool:
        # full fine-tuning trains everything but the frozen experts: allowed without adapters
        return True


def is_mxfp4_checkpoint(location: str) -> bool:
    config = AutoConfig.from_pretrained(location)
    quant = getattr(config, "quantization_config", None) or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    return str(method) == "mxfp4"


def load_native(location: str, **kwargs: Any) -> PreTrainedModel:
    """`AutoModelForCausalLM.from_pretrained(location, **kwargs)` with the experts kept MXFP4 (a checkpoint whose
    config.json says `quant_method: mxfp4`)."""
    if not is_mxfp4_checkpoint(location):
        raise ValueError(f"{location}: not an MXFP4 checkpoint (config.json has no mxfp4 quantization_config)")
    config = AutoConfig.from_pretrained(location)
    quant = config.quantization_config
    not_converted = quant.get("modules_to_not_convert") if isinstance(quant, dict) else None
    config.quantization_config = NativeMxfp4Config(not_converted).to_dict() | {"quant_method": METHOD}
    kwargs.pop("quantization_config", None)
    if "use_cache" in kwargs:  # a config attribute: from_pretrained only routes such kwargs when it reads the config
        config.use_cache = kwargs.pop("use_cache")
    loaded: Any = AutoModelForCausalLM.from_pretrained(location, config=config, output_loading_info=True, **kwargs)
    model, info = loaded
    missing = [key for key in info["missing_keys"] if ".experts." in key]
    if missing:
        raise ValueError(f"{location}: the MXFP4 checkpoint lacks {len(missing)} expert tensors, e.g. {missing[0]}")
    assert model.config._experts_implementation == NATIVE
    return model
