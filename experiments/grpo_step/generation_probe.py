"""One GRPO rollout (2 prompts x 4 completions, 16 new tokens) of SmolLM2-135M + LoRA, timed per generate call.

    python experiments/grpo_step/generation_probe.py fp32 4        # VARIANT [CALLS]
    OMP_NUM_THREADS=1 python experiments/grpo_step/generation_probe.py bf16w 3

VARIANT: fp32 | bf16w (bf16 weights, hw.precision=bf16) | autocast (fp32 weights, bf16 autocast: TRL's default)
| fp32_static / bf16w_static (static KV cache) | *_compile (static cache + torch.compile of the decode step).
Sampling as in training (temperature 0.7, no top-k/top-p). Prints seconds per call.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import torch
from transformers import CompileConfig, GenerationConfig

from posttrain.config.compose import load_config
from posttrain.data import build_grpo_dataset
from posttrain.hardware import apply_profile
from posttrain.models import load


def main(variant: str, calls: int) -> None:
    overrides = ["+experiment=grpo_smollm2_add", "data.heldout=0", "hw.threads=null"]
    if variant.startswith("bf16w"):
        overrides.append("hw.precision=bf16")
    cfg = load_config(overrides)
    apply_profile(cfg, overrides=set())
    model, tok = load(cfg)
    ds = build_grpo_dataset(cfg.data, tok, cfg.algo.max_prompt_length)
    prompts = [ds[i]["prompt"] for i in range(2) for _ in range(4)]
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    enc = tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    kwargs = dict(max_new_tokens=16, do_sample=True, temperature=0.7, top_k=0, top_p=1.0)
    kwargs.update(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    if "static" in variant or "compile" in variant:
        kwargs["cache_implementation"] = "static"
    if "compile" in variant:
        compile_config = CompileConfig()
        compile_config._compile_all_devices = True  # transformers compiles on CUDA-like devices only by default
        kwargs["compile_config"] = compile_config
    else:
        kwargs["disable_compile"] = True
    gen_cfg = GenerationConfig(**kwargs)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if variant == "autocast" else contextlib.nullcontext()
    model.train()  # as during training (no dropout in this model)
    print("prompt tokens", tuple(enc["input_ids"].shape), "threads", torch.get_num_threads(), flush=True)
    for i in range(calls):
        start = time.perf_counter()
        with torch.no_grad(), ctx:
            model.generate(**enc, generation_config=gen_cfg)
        load1 = Path("/proc/loadavg").read_text().split()[0]
        print(variant, i, round(time.perf_counter() - start, 3), load1, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
