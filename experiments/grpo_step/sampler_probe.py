"""Do the two paths sample equally good completions from the same (untrained) policy?

Builds both trainers of `python -m posttrain.bench grpo_step` (the `make train` configuration) and runs each one's own
rollout + reward step (`_generate_and_score_completions`: the anchor samples from its fp32 policy under bf16
autocast, posttrain from its bf16 rollout copy) on the same batches of training prompts, reseeding torch before
each batch so both draw the same random numbers. Prints each path's mean reward with a 95% bootstrap CI over
batches, the paired difference, and how many batches' rewards differ at all.

    OMP_NUM_THREADS=1 PYTHONPATH=src python experiments/grpo_step/sampler_probe.py --batches 60 \
        > experiments/grpo_step/results/sampler_probe.txt

The recorded output ran at 961aa16, when posttrain's default trained bf16 weights (fp32 master weights since
73d2817).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from posttrain.analysis.stats import bootstrap_ci
from posttrain.bench.grpo_step import compose
from posttrain.bench.grpo_step_trainers import build


def _batch_reward(trainer, rows: list[dict], seed: int) -> float:
    torch.manual_seed(seed)
    trainer._generate_and_score_completions(rows)
    return float(trainer._metrics["train"]["reward"][-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    base = ["+experiment=grpo_smollm2_add", f"seed={args.seed}", "trainer.progress_bar=false", "data.heldout=0"]
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {
            "trl": build("trl", compose([*base, "model.dtype=float32"]), Path(tmp) / "a"),
            "posttrain": build("posttrain", compose(base), Path(tmp) / "b"),
        }
        for trainer in trainers.values():  # as in training: the anchor's forward under accelerate's bf16 autocast
            trainer.model_wrapped = trainer.model = trainer.accelerator.prepare_model(trainer.model)
            trainer.model.train()
        data = trainers["trl"].train_dataset
        rewards: dict[str, list[float]] = {name: [] for name in trainers}
        for b in range(args.batches):
            rows = [data[(2 * b + i // 4) % len(data)] for i in range(8)]  # 2 prompts x 4 completions, as a step
            for name, trainer in trainers.items():
                rewards[name].append(_batch_reward(trainer, rows, 1000 + b))
    print(f"# {args.batches} batches of 2 prompts x 4 completions, untrained policy, seed {args.seed}")
    for name, r in rewards.items():
        lo, hi = bootstrap_ci(r)
        print(f"{name:>10s}: mean reward {statistics.fmean(r):.4f} [{lo:.4f}, {hi:.4f}]")
    diff = [p - a for a, p in zip(rewards["trl"], rewards["posttrain"], strict=True)]
    lo, hi = bootstrap_ci(diff)
    changed = sum(d != 0 for d in diff)
    print(
        f"posttrain - trl, paired by batch: {statistics.fmean(diff):+.4f} [{lo:+.4f}, {hi:+.4f}]; {changed} of "
        f"{len(diff)} batches differ (higher {sum(d > 0 for d in diff)}, lower {sum(d < 0 for d in diff)})"
    )


if __name__ == "__main__":
    main()
