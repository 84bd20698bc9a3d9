"""Where generation's time goes at the make-train configuration (SmolLM2-135M + LoRA, 2 prompts x 4
completions, 16 new tokens, prompts of the task's length, 1 thread): HF generate, then prefill and a plain decode
loop with the KV cache, the same loop with the LoRA merged, and the LM head alone.

    OMP_NUM_THREADS=1 python experiments/grpo_step/decode_probe.py > experiments/grpo_step/results/decode_probe.txt
"""

import time

import torch
from probe_batch import make_train_batch

from posttrain.config.compose import load_config
from posttrain.models import load

torch.set_num_threads(1)
cfg = load_config(["+experiment=grpo_smollm2_add"])
model, tok = load(cfg, with_lora=True)
model.eval()
enc = make_train_batch(tok)
print("prompt len", enc.input_ids.shape)


def gen():
    with torch.no_grad():
        return model.generate(
            **enc, max_new_tokens=16, min_new_tokens=16, do_sample=True, temperature=0.7, pad_token_id=tok.pad_token_id
        )


gen()
t = time.perf_counter()
gen()
print("generate 16 tok", round(time.perf_counter() - t, 3))


@torch.no_grad()
def prefill_and_decode(lm, steps: int = 15) -> tuple[float, float]:
    """Seconds of the prefill and of `steps` greedy decode steps with the KV cache (plain forward calls)."""
    t = time.perf_counter()
    out = lm(**enc, use_cache=True)
    prefill = time.perf_counter() - t
    past, ids = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    mask = torch.cat([enc.attention_mask, torch.ones(len(ids), 1, dtype=torch.long)], 1)
    t = time.perf_counter()
    for _ in range(steps):
        out = lm(input_ids=ids, attention_mask=mask, past_key_values=past, use_cache=True)
        past, ids = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        mask = torch.cat([mask, torch.ones(len(ids), 1, dtype=torch.long)], 1)
    return prefill, time.perf_counter() - t


pf, dec = prefill_and_decode(model)
print("prefill", round(pf, 3), "decode 15 steps", round(dec, 3), "per step", round(dec / 15 * 1000, 1), "ms")
merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
print("merged LoRA: per decode step", round(prefill_and_decode(merged)[1] / 15 * 1000, 1), "ms")
with torch.no_grad():
    x = torch.randn(8, 1, 576)
    t = time.perf_counter()
    for _ in range(15):
        merged.lm_head(x)
    print("lm head per step", round((time.perf_counter() - t) / 15 * 1000, 1), "ms")
