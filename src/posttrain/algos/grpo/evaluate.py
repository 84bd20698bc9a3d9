"""`mode=eval` for GRPO: sample completions for held-out prompts and score them with the task's rewards.

Held-out prompts come from the same generator with another seed (`data.seed + 10_000`), or from the data set's
eval split for hub/JSONL sources. `eval.checkpoint` picks the weights (see `posttrain.checkpoints.eval_checkpoint`):
trained adapters (or full weights), or the starting model with `eval.checkpoint=init`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.algos.grpo.rewards import reward_functions
from posttrain.data.grpo import build_grpo_dataset
from posttrain.dist import device_for
from posttrain.models.generation import generate

HELD_OUT_SEED = 10_000


def load_trained_weights(model: Any, checkpoint: Path) -> None:
    """Adapters (`adapter_model.safetensors`) into a PEFT model, or full weights (`model.safetensors`)."""
    from safetensors.torch import load_file

    from posttrain.errors import CheckpointError

    adapters, full = checkpoint / "adapter_model.safetensors", checkpoint / "model.safetensors"
    if adapters.is_file():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(adapters)))
    elif full.is_file():
        model.load_state_dict(load_file(str(full)), strict=False)
    else:
        raise CheckpointError(f"{checkpoint}: no adapter_model.safetensors or model.safetensors")


@torch.no_grad()
def score(cfg: DictConfig, model: Any, tokenizer: Any, n_prompts: int, samples: int = 4) -> dict[str, float]:
    """Mean reward (and per reward function) over `samples` sampled completions of `n_prompts` held-out prompts."""
    data_cfg = cfg.data.copy()
    OmegaConf.set_readonly(data_cfg, False)  # a changed copy; the run's own config stays read-only
    with open_dict(data_cfg):
        data_cfg.seed = cfg.data.seed + HELD_OUT_SEED
        data_cfg.num_train = n_prompts
        data_cfg.split = "test"  # generators with a held-out split use it (data=add); the others ignore it
    ds = build_grpo_dataset(data_cfg, tokenizer, cfg.algo.max_prompt_length)
    funcs, weights = reward_functions(cfg)
    gen = cfg.algo.trl  # TRL's sampling fields, as training samples
    totals: dict[str, list[float]] = {f.__name__: [] for f in funcs}
    totals["reward"] = []
    for row in ds:
        prompt = row["prompt"]
        texts, ids = generate(
            model,
            tokenizer,
            [prompt],
            max_new_tokens=cfg.algo.trl.max_completion_length,
            num_return_sequences=samples,
            do_sample=True,
            temperature=gen.temperature,
            top_p=gen.top_p,
            top_k=gen.top_k or None,
        )
        completions: list[Any] = texts
        if isinstance(prompt, list):
            completions = [[{"role": "assistant", "content": c}] for c in texts]
        columns = {k: [v] * samples for k, v in row.items() if k != "prompt"}
        per_func = [f([prompt] * samples, completions, completion_ids=ids, **columns) for f in funcs]
        for f, vals in zip(funcs, per_func):
            totals[f.__name__].extend(vals)
        totals["reward"].extend(sum(w * v[i] for w, v in zip(weights, per_func)) for i in range(samples))
    return {f"eval_{k}": sum(v) / len(v) for k, v in totals.items() if v}


def evaluate(cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
    """Held-out rewards of `checkpoint` (None: the starting model)."""
    from posttrain.models import load

    torch.manual_seed(cfg.seed)
    model, tokenizer = load(cfg)
    if checkpoint is not None:
        load_trained_weights(model, checkpoint)
    model.to(device_for(cfg))
    n = cfg.data.num_eval or 32
    summary: dict[str, Any] = {
        "algo": "grpo",
        "mode": "eval",
        "checkpoint": str(checkpoint) if checkpoint else None,
        "eval_prompts": n,
    }
    summary.update(score(cfg, model, tokenizer, n))
    if cfg.algo.heldout:
        from posttrain.algos.grpo.heldout import heldout_accuracy

        summary["heldout_acc"] = heldout_accuracy(cfg, model, tokenizer, run_dir, "eval")["acc"]
    summary["objective"] = summary.get("eval_reward")
    return summary
