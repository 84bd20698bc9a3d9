"""Random-init causal LMs of any size from a transformers config, seeded: `random_init_model(config, ...)`.

Small models (at most `EAGER_MAX_PARAMS`) are built as they always were: `from_config` on the CPU under the seed,
so the tiny test models and the numbers recorded with them keep their exact weights on every machine. Larger
ones are built on the meta device (no memory, no init), materialised where they will train (`to_empty`) and
initialised there by transformers' own `init_weights` (its `_init_weights`: normal(0, initializer_range) for
linear, embedding, GPT-OSS experts, sinks and router; zero biases; unit norms; RoPE buffers recomputed; tied
weights tied). That skips the eager path's two passes over every weight on the host (torch's default init, then
transformers'), which for gpt-oss-20b had not finished after 9 minutes on a 16-core host.

`mxfp4` (GPT-OSS): the experts are drawn directly as MXFP4 blocks and scales (posttrain.models.mxfp4: uniform random
codes at the scale whose standard deviation is closest to initializer_range), never as bf16 weights, and kept so
(`native`) or dequantized into bf16 parameters afterwards (`dequantize`: the same weights). On the meta path the
experts' bytes are drawn in a second thread while transformers initialises the rest: the full 20.9B architecture
builds with 12.8 GiB in about 25 s on two cores (45 s one after the other).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

# Up to here the eager CPU build takes about a second (125M parameters in fp32: 1.0 s on 2 cores) and keeps the
# weights every existing tiny config had. Above it the meta build is faster on the CPU too (llama3_2_1b arch in bf16,
# 2 shared cores: 6.7-8.0 s against 14.8-22.8 s; transformers' normal_ draws are all that is left).
EAGER_MAX_PARAMS = 200_000_000


def num_params(model: torch.nn.Module) -> int:
    """Parameters counted once (tied weights once), meta tensors included."""
    return sum(p.numel() for p in model.parameters())


@contextlib.contextmanager
def _built_whole() -> Iterator[None]:
    """Build outside DeepSpeed's `zero.Init`: under ZeRO-3 (`zero3_init_flag`) transformers partitions a model as it
    is constructed and draws its init in another order, so the same seed would give other weights than on one
    process. Random weights are drawn whole, the same on every rank and under every engine, and ZeRO-3 partitions
    them at `deepspeed.initialize` (pretrained weights are still partitioned while loading)."""
    from transformers.integrations import deepspeed as hf_deepspeed

    ref = hf_deepspeed._hf_deepspeed_config_weak_ref  # set_hf_deepspeed_config's only state
    held = ref() if ref is not None else None
    if held is None:
        yield
        return
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed.set_hf_deepspeed_config(held)


def random_init_model(
    config: PretrainedConfig, dtype: torch.dtype, device: torch.device | str, seed: int, mxfp4: str | None = None
) -> PreTrainedModel:
    """A random-init `AutoModelForCausalLM` for `config` in `dtype` on `device`, the same weights for the same seed
    (and, above `EAGER_MAX_PARAMS`, the same device type: the CPU and CUDA generators differ); `mxfp4`: native |
    dequantize for GPT-OSS experts drawn in MXFP4 (None: bf16 experts)."""
    device = torch.device(device)
    with _built_whole():
        return _random_init_model(config, dtype, device, seed, mxfp4)


def _random_init_model(
    config: PretrainedConfig, dtype: torch.dtype, device: torch.device, seed: int, mxfp4: str | None
) -> PreTrainedModel:
    from posttrain.models.mxfp4.experts import dequantize_experts_, init_random_, mark_initialized, to_native

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    std = float(getattr(config, "initializer_range", 0.02))
    if num_params(model) <= EAGER_MAX_PARAMS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        if mxfp4:
            init_random_(to_native(model), std, seed)
            if mxfp4 == "dequantize":
                dequantize_experts_(model)
        return model.to(device)
    if mxfp4:
        to_native(model)  # on the meta device: the bf16 experts are never allocated
    model.to_empty(device=device)
    experts = None
    if mxfp4:  # the experts' bytes are drawn beside transformers' init of the rest (disjoint tensors, own streams)
        mark_initialized(model)
        experts = ThreadPoolExecutor(1).submit(init_random_, model, std, seed)
    # A tied LM head is replaced by the embedding after init: one draw of the [vocab, hidden] table, not two.
    model.mark_tied_weights_as_initialized(loading_info=None)  # only custom-code models read loading_info
    accelerators = [device] if device.type != "cpu" else []
    with torch.random.fork_rng(devices=accelerators, device_type=device.type if accelerators else "cuda"):
        torch.manual_seed(seed)
        model.init_weights()
    if experts is not None:
        experts.result()
    if mxfp4 == "dequantize":
        dequantize_experts_(model)
    return model
