"""Held-out accuracy for GRPO: greedy decoding on `data.heldout` problems of the task's test split, scored with the
task's own `math` reward (same checker and options as in training), before and after training.

Each call writes `heldout_<tag>.jsonl` in the run dir (prompt, answer, completion, correct per problem), so
confidence intervals over problems can be computed later.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.config.validate import ConfigError

CHECKER = "math"


def heldout_checker(data_cfg: DictConfig) -> Callable[..., list[float]]:
    """The `math` reward exactly as `data.rewards` configures it (the checker the reward trains on)."""
    from posttrain.rewards import build

    specs = [s for s in OmegaConf.to_container(data_cfg.rewards, resolve=True) if s.get("name") == CHECKER]
    if not specs:
        raise ConfigError(f"data.heldout={data_cfg.heldout} needs a `{CHECKER}` reward in data.rewards (its checker)")
    spec = {k: v for k, v in specs[0].items() if k != "weight"}
    return build([spec])[0][0]


@torch.no_grad()
def greedy_completions(
    model: Any, tokenizer: Any, prompts: list[Any], max_new_tokens: int, batch_size: int
) -> list[str]:
    """Greedy completions of `prompts` (conversations or strings), `batch_size` at a time with left padding."""
    texts = [
        tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) if isinstance(p, list) else p
        for p in prompts
    ]
    side, was_training = tokenizer.padding_side, model.training
    tokenizer.padding_side = "left"
    model.eval()
    out: list[str] = []
    try:
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = enc.to(model.device)
            ids = model.generate(
                **enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                use_cache=True, temperature=None, top_p=None, top_k=None,
            )
            out += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def heldout_accuracy(cfg: DictConfig, model: Any, tokenizer: Any, run_dir: Path | None, tag: str) -> dict[str, Any]:
    """`{"acc", "n", "seconds"}` over the first `data.heldout` test problems; per-problem rows to run_dir."""
    from posttrain.data.grpo import build_grpo_dataset

    data_cfg = cfg.data.copy()
    with open_dict(data_cfg):
        data_cfg.split, data_cfg.num_train = "test", cfg.data.heldout
    ds = build_grpo_dataset(data_cfg, tokenizer, cfg.algo.max_prompt_length)
    checker = heldout_checker(cfg.data)
    start = time.time()
    completions = greedy_completions(
        model, tokenizer, list(ds["prompt"]), cfg.algo.max_completion_length, cfg.data.heldout_batch_size
    )
    columns = {k: list(ds[k]) for k in ds.column_names if k != "prompt"}
    correct = checker(list(ds["prompt"]), completions, **columns)
    seconds = time.time() - start
    if run_dir is not None:
        with open(Path(run_dir) / f"heldout_{tag}.jsonl", "w") as f:
            for i, (c, ok) in enumerate(zip(completions, correct)):
                row = {"prompt": ds[i]["prompt"], "answer": columns.get("answer", [None] * len(ds))[i]}
                f.write(json.dumps({**row, "completion": c, "correct": ok}) + "\n")
    return {"acc": sum(correct) / len(correct), "n": len(correct), "seconds": round(seconds, 2)}
