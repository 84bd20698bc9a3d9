"""Random-init causal LMs of any size from a transformers config, seeded: `random_init_model(config, ...)`.

Small models (at most `EAGER_MAX_PARAMS`) are built as they always were: `from_config` on the CPU under the seed,
so the tiny test models and the numbers recorded with them keep their exact weights on every machine. Larger
ones are built on the meta device (no memory, no init), materialised where they will train (`to_empty`) and
initialised there by transformers' own `init_weights` (its `_init_weights`: normal(0, initializer_range) for
linear, embedding, GPT-OSS experts, sinks and router; zero biases; unit norms; RoPE buffers recomputed; tied
weights tied). That skips the eager path's two passes over every weight on the host (torch's default init, then
transformers'), which for gpt-oss-20b had not finished after 9 minutes on a 16-core host.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

# Up to here the eager CPU build takes about a second (125M parameters in fp32: 1.0 s on 2 cores) and keeps the
# weights every existing tiny config had. Above it the meta build is faster on the CPU too (llama3_2_1b arch in bf16,
# 2 shared cores: 6.7-8.0 s against 14.8-22.8 s; transformers' normal_ draws are all that is left).
EAGER_MAX_PARAMS = 200_000_000


def num_params(model: torch.nn.Module) -> int:
    """Parameters counted once (tied weights once), meta tensors included."""
    return sum(p.numel() for p in model.parameters())


def random_init_model(
    config: PretrainedConfig, dtype: torch.dtype, device: torch.device | str, seed: int
) -> PreTrainedModel:
    """A random-init `AutoModelForCausalLM` for `config` in `dtype` on `device`, the same weights for the same seed
    (and, above `EAGER_MAX_PARAMS`, the same device type: the CPU and CUDA generators differ)."""
    device = torch.device(device)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if num_params(model) <= EAGER_MAX_PARAMS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        return model.to(device)
    model.to_empty(device=device)
    # A tied LM head is replaced by the embedding after init: one draw of the [vocab, hidden] table, not two.
    model.mark_tied_weights_as_initialized(loading_info=None)  # only custom-code models read loading_info
    accelerators = [device] if device.type != "cpu" else []
    with torch.random.fork_rng(devices=accelerators, device_type=device.type if accelerators else "cuda"):
        torch.manual_seed(seed)
        model.init_weights()
    return model
