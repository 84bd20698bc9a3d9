"""Held-out accuracy for GRPO: greedy decoding on `algo.heldout` problems of the task's test split (from problem
`algo.heldout_start`), scored with the task's own `math` reward (same checker and options as in training), before
and after training.

Each call writes `heldout_<tag>.jsonl` in the run dir (prompt, answer, completion, correct per problem), so
confidence intervals over problems can be computed later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.config.validate import ConfigError
from posttrain.models.generation import generate

CHECKER = "math"


def heldout_checker(algo_cfg: DictConfig) -> Callable[..., list[float]]:
    """The `math` reward exactly as `algo.rewards` configures it (the checker the reward trains on)."""
    from posttrain.rewards import build

    specs = [s for s in OmegaConf.to_container(algo_cfg.rewards, resolve=True) if s.get("name") == CHECKER]
    if not specs:
        raise ConfigError(f"algo.heldout={algo_cfg.heldout} needs a `{CHECKER}` reward in algo.rewards (its checker)")
    spec = {k: v for k, v in specs[0].items() if k != "weight"}
    return build([spec])[0][0]


def heldout_accuracy(cfg: DictConfig, model: Any, tokenizer: Any, run_dir: Path | None, tag: str) -> dict[str, Any]:
    """`{"acc", "n", "seconds", "correct"}` over test problems `algo.heldout_start` .. `+ algo.heldout` (`correct`: per
    problem, in order); per-problem rows to run_dir."""
    from posttrain.data.grpo import build_grpo_dataset

    start = cfg.algo.heldout_start
    data_cfg = cfg.data.copy()
    OmegaConf.set_readonly(data_cfg, False)  # a changed copy; the run's own config stays read-only
    with open_dict(data_cfg):
        data_cfg.split, data_cfg.num_train = "test", start + cfg.algo.heldout
    ds = build_grpo_dataset(data_cfg, tokenizer, cfg.algo.max_prompt_length)
    ds = ds.select(range(start, len(ds)))
    checker = heldout_checker(cfg.algo)
    began = time.time()
    completions, _ = generate(
        model,
        tokenizer,
        list(ds["prompt"]),
        max_new_tokens=cfg.algo.trl.max_completion_length,
        batch_size=cfg.algo.heldout_batch_size,
        desc=f"held-out problems ({tag})",
    )
    columns = {k: list(ds[k]) for k in ds.column_names if k != "prompt"}
    correct = checker(list(ds["prompt"]), completions, **columns)
    seconds = time.time() - began
    if run_dir is not None:
        with open(Path(run_dir) / f"heldout_{tag}.jsonl", "w") as f:
            for i, (c, ok) in enumerate(zip(completions, correct)):
                row = {"prompt": ds[i]["prompt"], "answer": columns.get("answer", [None] * len(ds))[i]}
                f.write(json.dumps({**row, "completion": c, "correct": ok}) + "\n")
    acc = sum(correct) / len(correct)
    return {"acc": acc, "n": len(correct), "seconds": round(seconds, 2), "correct": [float(c) for c in correct]}


def heldout_summary(cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
    """`heldout_acc_before` / `_after` (and n, seconds) for summary.json when `algo.heldout` > 0."""
    before = getattr(trainer, "heldout_before", None)
    if not cfg.algo.heldout or before is None:
        return {}
    after = heldout_accuracy(cfg, trainer.model, trainer.processing_class, run_dir, "after")
    return {
        "heldout_acc_before": before["acc"],
        "heldout_acc_after": after["acc"],
        "heldout_n": after["n"],
        "heldout_eval_s": round(before["seconds"] + after["seconds"], 2),
    }
