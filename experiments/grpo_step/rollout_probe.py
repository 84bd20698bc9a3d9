"""Seconds per GRPO rollout at the make-train configuration (SmolLM2-135M + LoRA, 2 prompts x 4 completions, 16 new
tokens, sampling at temperature 0.7, 1 thread) for each generation model, with and without the loader's contiguous
LM-head input (the fix for prefill's batch-broadcast of the head weight):

- `policy bf16+lora`: the bf16 policy with its fp32 adapters (what TRL's transformers generation samples from)
- `copy merged`: posttrain's rollout copy without oneDNN packing (LoRA merged, plain bf16 linears)
- `copy packed`: the rollout copy as `algo.generation.backend=bf16_copy` builds it

    OMP_NUM_THREADS=1 python experiments/grpo_step/rollout_probe.py > experiments/grpo_step/results/rollout_probe.txt
"""

import statistics
import time

import torch
from probe_batch import make_train_batch

from posttrain.config.compose import load_config
from posttrain.models import load
from posttrain.rollout import merged_copy as rollout_copy

torch.set_num_threads(1)
cfg = load_config(["+experiment=grpo_smollm2_add", "hw.precision=bf16"])
policy, tok = load(cfg, with_lora=True)
policy.eval()
enc = make_train_batch(tok)
policy.generation_config.pad_token_id = tok.pad_token_id


def rollout_s(model, repeats: int = 3) -> float:
    """Median seconds of `generate` (16 new tokens, sampled), after one warm-up call."""
    times = []
    for i in range(repeats + 1):
        torch.manual_seed(i)
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(**enc, max_new_tokens=16, min_new_tokens=16, do_sample=True, temperature=0.7)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def head(model) -> torch.nn.Module:
    return model.get_output_embeddings()


models = {"policy bf16+lora": policy}
packing = rollout_copy.packing_available
rollout_copy.packing_available = lambda: False  # type: ignore[assignment]
models["copy merged"] = rollout_copy.RolloutCopy(policy, attn_implementation="sdpa").model
rollout_copy.packing_available = packing
models["copy packed"] = rollout_copy.RolloutCopy(policy, attn_implementation="sdpa").model
print(f"prompts {tuple(enc.input_ids.shape)}, 16 new tokens, 1 thread; median of 3 rollouts (s)")
for name, model in models.items():
    with_hook = rollout_s(model)
    hooks = dict(head(model)._forward_pre_hooks)
    head(model)._forward_pre_hooks.clear()
    without = rollout_s(model)
    head(model)._forward_pre_hooks.update(hooks)
    print(f"{name:18s} contiguous head input {with_hook:.3f}   without {without:.3f}")
