"""What the missing KV cache cost GRPO's rollouts: the make-train rollout batch (SmolLM2-135M, 8 prompts x 16 new
tokens, greedy, EOS suppressed) with transformers' `generate` on the bf16 rollout copy and on the policy, with the
`use_cache=False` the policy is loaded with (what TRL's step inherited) and with the cache.

    python experiments/grpo_step/kv_cache_probe.py [--threads 1] [--repeats 3]

Prints one JSON line per (model, use_cache): best-of-repeats seconds and tokens per second.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
from transformers import GenerationConfig

from posttrain.config.compose import load_config
from posttrain.data import build_grpo_dataset
from posttrain.models import load
from posttrain.rollout.engine import RolloutEngine
from posttrain.rollout.merged_copy import RolloutCopy

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--repeats", type=int, default=3)
args = p.parse_args()
torch.set_num_threads(args.threads)
cfg = load_config(["+experiment=grpo_smollm2_add", "hw=cpu", "hw.precision=fp32"])
policy, tok = load(cfg)
data = build_grpo_dataset(cfg.data, tok, cfg.algo.max_prompt_length)
prompts = [tok.apply_chat_template(data[i]["prompt"], add_generation_prompt=True, return_dict=False) for i in range(8)]
eos = [tok.eos_token_id]
new = cfg.algo.max_completion_length
models = {"policy fp32": policy, "bf16 copy": RolloutCopy(policy, attn_implementation="sdpa").model}
for name, model in models.items():
    for use_cache in (False, True):
        config = GenerationConfig(
            max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=use_cache, disable_compile=True
        )
        engine = RolloutEngine(model, copy.deepcopy(config), pad_token_id=tok.pad_token_id, eos_token_ids=eos)
        engine.generate(prompts)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            engine.generate(prompts)
            times.append(time.perf_counter() - start)
        best = min(times)
        record = {"model": name, "use_cache": use_cache, "seconds": round(best, 3)}
        record.update(tokens_per_s=round(len(prompts) * new / best, 1), threads=args.threads)
        print(json.dumps(record), flush=True)
