"""`mode=eval` for GRPO: sample completions for held-out prompts and score them with the task's rewards.

Held-out prompts come from the same generator with another seed (`data.seed + 10_000`), or from the data set's
eval split for hub/JSONL sources. `resume=<checkpoint>`/`auto` evaluates trained adapters; without it, the
initial model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, open_dict

from posttrain.algos.grpo.rewards import reward_functions
from posttrain.checkpoints import resolve_resume
from posttrain.data.grpo import build_grpo_dataset

HELD_OUT_SEED = 10_000


def _load_adapter(model: Any, checkpoint: str) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(Path(checkpoint) / "adapter_model.safetensors")))


@torch.no_grad()
def score(cfg: DictConfig, model: Any, tokenizer: Any, n_prompts: int, samples: int = 4) -> dict[str, float]:
    """Mean reward (and per reward function) over `samples` sampled completions of `n_prompts` held-out prompts."""
    data_cfg = cfg.data.copy()
    with open_dict(data_cfg):
        data_cfg.seed = cfg.data.seed + HELD_OUT_SEED
        data_cfg.num_train = n_prompts
        data_cfg.split = "test"  # generators with a held-out split use it (data=add); the others ignore it
    ds = build_grpo_dataset(data_cfg, tokenizer, cfg.algo.max_prompt_length)
    funcs, weights = reward_functions(cfg.data)
    gen = cfg.algo.generation
    model.eval()
    totals: dict[str, list[float]] = {f.__name__: [] for f in funcs}
    totals["reward"] = []
    for row in ds:
        prompt = row["prompt"]
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False) if isinstance(
            prompt, list) else prompt
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        out = model.generate(
            **enc, do_sample=True, temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k or None,
            max_new_tokens=cfg.algo.max_completion_length, num_return_sequences=samples,
            pad_token_id=tokenizer.pad_token_id,
        )
        ids = [[t for t in seq.tolist() if t != tokenizer.pad_token_id] for seq in out[:, enc.input_ids.size(1):]]
        completions = [tokenizer.decode(c, skip_special_tokens=True) for c in ids]
        if isinstance(prompt, list):
            completions = [[{"role": "assistant", "content": c}] for c in completions]
        columns = {k: [v] * samples for k, v in row.items() if k != "prompt"}
        per_func = [f([prompt] * samples, completions, completion_ids=ids, **columns) for f in funcs]
        for f, vals in zip(funcs, per_func):
            totals[f.__name__].extend(vals)
        totals["reward"].extend(sum(w * v[i] for w, v in zip(weights, per_func)) for i in range(samples))
    return {f"eval_{k}": sum(v) / len(v) for k, v in totals.items() if v}


def evaluate(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    from posttrain.models import load

    torch.manual_seed(cfg.seed)
    model, tokenizer = load(cfg)
    checkpoint = resolve_resume(cfg.resume, run_dir)
    if checkpoint:
        _load_adapter(model, checkpoint)
    n = cfg.data.num_eval or 32
    summary: dict[str, Any] = {"algo": "grpo", "mode": "eval", "checkpoint": checkpoint, "eval_prompts": n}
    summary.update(score(cfg, model, tokenizer, n))
    if cfg.data.heldout:
        from posttrain.algos.grpo.heldout import heldout_accuracy

        summary["heldout_acc"] = heldout_accuracy(cfg, model, tokenizer, run_dir, "eval")["acc"]
    summary["objective"] = summary.get("eval_reward")
    return summary
