"""How far the bf16 rollout copy's sampling distribution is from the policy it stands for, step by step.

Trains the `make train` configuration (posttrain's default path) and after every optimizer step, on a fixed batch
of prompt + sampled completion sequences, compares per completion token:
- `copy_kl`: KL(copy || policy) of the next-token distributions (what sampling from the copy instead of the policy
  costs: the GRPO gradient assumes samples from the policy),
- `step_kl`: KL(policy_t || policy_{t-1}) (how far one optimizer step moves the policy),
- `delta_err`: ||merged bf16 delta - true LoRA delta|| / ||true LoRA delta|| over the adapted weights, the merged
  delta being the copy's weight minus the base weight in bf16 (how much of the update the bf16 merge loses).

    OMP_NUM_THREADS=1 PYTHONPATH=src python experiments/grpo_step/copy_lag_probe.py --steps 30 --seed 0 \
        --set model.dtype=bfloat16 --out experiments/grpo_step/results/copy_lag_probe.txt
    OMP_NUM_THREADS=1 PYTHONPATH=src python experiments/grpo_step/copy_lag_probe.py --steps 30 --seed 0 \
        --out experiments/grpo_step/results/copy_lag_probe_fp32master.txt

The first: bf16 weights (the default when it ran, at 961aa16), the copy merges the LoRA onto bf16 values; the
second: fp32 master weights (the hw=cpu default since 73d2817), the merge rounds base + delta once from fp32.
`unmerged_kl` is the same KL for a bf16 copy that keeps the adapters apart (rounds no update): the floor set by
bf16 numerics and the attention kernel alone.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import torch
from probe_batch import make_train_batch
from transformers import TrainerCallback

from posttrain.bench.grpo_step import compose
from posttrain.bench.grpo_step_trainers import build


def _logprobs(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(**batch).logits[:, :-1].float()
    return torch.log_softmax(logits, -1)


def _kl(p_log: torch.Tensor, q_log: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over masked positions of KL(p || q)."""
    kl = (p_log.exp() * (p_log - q_log)).sum(-1)
    return float((kl * mask).sum() / mask.sum())


def _delta_err(trainer) -> float:
    from peft.tuners.lora import LoraLayer

    from posttrain.rollout.merged_copy import _copy_name

    policy = trainer.accelerator.unwrap_model(trainer.model)
    copy_params = trainer.rollout.rollout_copy._params  # by the names before packing
    err = ref = 0.0
    for name, layer in policy.named_modules():
        if isinstance(layer, LoraLayer):
            base = layer.get_base_layer().weight.bfloat16().float()  # as the copy holds it before any update
            delta = sum(layer.get_delta_weight(a).float() for a in layer.active_adapters)
            merged = copy_params[_copy_name(name) + ".weight"].float()
            err += float(((merged - base) - delta).pow(2).sum())
            ref += float(delta.pow(2).sum())
    return (err / ref) ** 0.5 if ref else float("nan")


def _unmerged_copy(policy):
    """The policy in bf16 with its LoRA adapters kept apart (bf16 too), sdpa attention: a copy that rounds no update."""
    model = copy.deepcopy(policy).to(torch.bfloat16).eval()
    for module in model.modules():
        module.__dict__.pop("forward", None)  # accelerate's autocast wrapper (see rollout_copy)
    model.base_model.model.set_attn_implementation("sdpa")
    return model


class Probe(TrainerCallback):
    def __init__(self, trainer, batch, mask, out):
        self.trainer, self.batch, self.mask, self.out = trainer, batch, mask, out
        self.prev = self.first = None

    def measure(self, step: int) -> None:
        trainer = self.trainer
        policy = trainer.accelerator.unwrap_model(trainer.model)
        trainer.rollout.rollout_copy.sync(policy)
        policy.eval()
        pol = _logprobs(trainer.model, self.batch)  # the policy as training runs it (autocast wrapper)
        policy.train()
        cop = _logprobs(trainer.rollout.rollout_copy.model, self.batch)
        unmerged = _logprobs(_unmerged_copy(policy), self.batch)
        if self.first is None:
            self.first = pol
        step_kl = _kl(pol, self.prev, self.mask) if self.prev is not None else float("nan")
        print(
            f"{step:4d} copy_kl {_kl(cop, pol, self.mask):.2e}  unmerged_kl {_kl(unmerged, pol, self.mask):.2e}  "
            f"step_kl {step_kl:.2e}  kl_from_init {_kl(pol, self.first, self.mask):.2e}  "
            f"delta_err {_delta_err(trainer):.3f}",
            file=self.out,
            flush=True,
        )
        self.prev = pol

    def on_step_end(self, args, state, control, **kwargs):
        self.measure(state.global_step)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cfg = compose(
        [
            "+experiment=grpo_smollm2_add",
            f"seed={args.seed}",
            f"trainer.max_steps={args.steps}",
            "trainer.progress_bar=false",
            "trainer.save_steps=1000000000",
            "data.heldout=0",
            *args.set,
        ]
    )
    with tempfile.TemporaryDirectory() as tmp, args.out.open("w") as out:
        print(f"# seed {args.seed}, {args.steps} steps, make-train configuration {args.set or ''}", file=out)
        trainer = build("posttrain", cfg, Path(tmp))
        tok = trainer.processing_class
        enc = make_train_batch(tok)
        torch.manual_seed(args.seed)
        ids = trainer.rollout.rollout_copy.model.generate(
            **enc, do_sample=True, temperature=0.7, max_new_tokens=16, pad_token_id=tok.pad_token_id
        )
        attn = (ids != tok.pad_token_id).long()
        attn[:, : enc.input_ids.shape[1]] = enc.attention_mask
        batch = {"input_ids": ids, "attention_mask": attn}
        mask = attn[:, 1:].clone().float()
        mask[:, : enc.input_ids.shape[1] - 1] = 0  # completion tokens only
        probe = Probe(trainer, batch, mask, out)
        probe.measure(0)
        trainer.add_callback(probe)
        trainer.train()


if __name__ == "__main__":
    main()
