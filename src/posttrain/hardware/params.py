"""Parameter counts from the model config: the architecture is built on the `meta` device and counted.

No name table: `posttrain.models.hf_config(cfg.model)` gives the transformers config from conf/model/*.yaml,
`AutoModelForCausalLM.from_config` under `torch.device("meta")` builds every tensor's shape without memory,
and PEFT wraps that meta model with the run's own `LoraConfig`, so trainable counts (attention projections,
GPT-OSS experts through `target_parameters`) and their dtypes are PEFT's own.

Conventions:
- total: every parameter once (tied embeddings counted once).
- active: what one token's compute touches: MoE experts scaled by num_experts_per_tok / num_local_experts,
  and the input embedding table left out when it is not tied to the LM head (a lookup, not a matmul). This
  is the convention behind gpt-oss-20b's published 3.6B active.
- `model.mxfp4=native` (GPT-OSS): the meta model's experts are made native as the loader makes them
  (posttrain.models.mxfp4.experts.to_native), so the expert weights are counted as the uint8 blocks and scales they
  are held in (17 bytes per 32 values) and never as trainable; `total` still counts each expert weight once.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch
from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    trainable: int
    weight_bytes: int  # base weights (+ adapters) in their load dtype
    trainable_bytes: int  # trainable parameters in their own dtype (LoRA adapters: fp32 under PEFT)
    embedding: int  # input embedding table
    lm_head: int  # output projection (0 when tied)
    experts: int  # all expert parameters (MoE)
    mxfp4_bytes: int  # bytes of MXFP4 expert blocks and scales (model.mxfp4=native; 0 otherwise)
    layer_linear: int  # nn.Linear weights inside the decoder layers (what bitsandbytes 4-bit quantizes)
    adapters: int  # LoRA parameters
    largest_trainable: int  # numel of the largest trainable tensor
    dtype_bytes: int  # bytes per element of the base weights


def _mxfp4_values(model: torch.nn.Module) -> tuple[int, int]:
    """(expert weight values, their bytes) held as MXFP4 blocks and scales (buffers of native experts)."""
    values = stored = 0
    for name, buffer in model.named_buffers():
        if name.endswith("_blocks"):
            values += buffer.numel() * 2
        if name.endswith(("_blocks", "_scales")):
            stored += buffer.numel() * buffer.element_size()
    return values, stored


def _experts_of(model: torch.nn.Module) -> set[str]:
    """Names of parameters that live under an experts container (an MoE's batched expert weights)."""
    names = set()
    for mod_name, module in model.named_modules():
        if mod_name.split(".")[-1] == "experts":
            for p_name, _ in module.named_parameters(recurse=True):
                names.add(f"{mod_name}.{p_name}")
    return names


@lru_cache(maxsize=64)
def _count(model_json: str, dtype_name: str, train: str) -> ParamCounts:
    from transformers import AutoModelForCausalLM

    from posttrain.models import hf_config
    from posttrain.models.lora import lora_config

    model_cfg = OmegaConf.create(json.loads(model_json))
    config = hf_config(model_cfg)
    dtype = getattr(torch, dtype_name)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if model_cfg.get("quantization") == "mxfp4" and model_cfg.get("mxfp4") == "native":
        from posttrain.models.mxfp4.experts import to_native

        to_native(base)
    mxfp4_values, mxfp4_bytes = _mxfp4_values(base)
    embed = base.get_input_embeddings().weight
    head = base.get_output_embeddings().weight
    tied = head is embed
    expert_names = _experts_of(base)
    k = getattr(config, "num_experts_per_tok", None) or 1
    n_exp = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) or 1
    total = experts = mxfp4_values
    active_f = mxfp4_values * k / n_exp
    for name, p in base.named_parameters():
        total += p.numel()
        if name in expert_names:
            experts += p.numel()
            active_f += p.numel() * k / n_exp
        elif p is embed and not tied:
            continue
        else:
            active_f += p.numel()
    layer_linear = sum(
        m.weight.numel() for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n
    )
    model = base
    if train == "lora":
        from peft import get_peft_model

        from posttrain.models.checks import check_lora_targets

        check_lora_targets(base, model_cfg)  # the plan runs before any weights load: a bad name fails here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = get_peft_model(base, lora_config(model_cfg))
    elif train == "frozen":
        model.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_all = sum(p.numel() for p in model.parameters()) + mxfp4_values
    return ParamCounts(
        total=total,
        active=int(round(active_f)),
        trainable=sum(p.numel() for p in trainable),
        weight_bytes=sum(p.numel() * p.element_size() for p in model.parameters()) + mxfp4_bytes,
        trainable_bytes=sum(p.numel() * p.element_size() for p in trainable),
        embedding=embed.numel(),
        lm_head=0 if tied else head.numel(),
        experts=experts,
        mxfp4_bytes=mxfp4_bytes,
        layer_linear=layer_linear,
        adapters=n_all - total,
        largest_trainable=max((p.numel() for p in trainable), default=0),
        dtype_bytes=dtype.itemsize,
    )


def count_params(cfg: DictConfig, train: str | None = None) -> ParamCounts:
    """Counts for `cfg.model` in the dtype `cfg.hw` loads it in; `train`: lora | full | frozen (default: LoRA when
    `model.lora.enabled`, else full; the algorithm's workload says when the base stays frozen)."""
    from posttrain.models import torch_dtype

    dtype = torch_dtype(cfg.model, cfg.hw)
    model_json = json.dumps(OmegaConf.to_container(cfg.model, resolve=True), sort_keys=True)
    train = train or ("lora" if cfg.model.lora.enabled else "full")
    return _count(model_json, str(dtype).removeprefix("torch."), train)
