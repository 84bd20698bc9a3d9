"""Does posttrain's default path compute the same GRPO update as plain TRL, given the same rollouts?

Builds both trainers of `python -m posttrain.bench grpo_step` (the `make train` configuration) and first says whether
they start from the same LoRA A matrices (the seed's draw). Then gives them the same
LoRA weights (A from posttrain's draw, B random so both factors get gradients), samples one batch of rollouts with
the anchor and sets fixed advantages (+1/-1 alternating within each group), then takes one loss+backward in each
and in an fp32 reference (the anchor's model without autocast, TRL's loss). Prints, per path, the cosine and norm
ratio of its LoRA gradient against the fp32 reference's, for each of --batches batches (and, for scale, the
cosine between different batches' reference gradients); `--variant KEY=VALUE` adds posttrain with that override.

    OMP_NUM_THREADS=1 PYTHONPATH=src python experiments/grpo_step/grad_agreement_probe.py --batches 4 \
        --variant kernels=trl --variant model.dtype=float32 \
        > experiments/grpo_step/results/grad_agreement_probe.txt

The recorded output ran at 961aa16, when posttrain's default trained bf16 weights (fp32 master weights since
73d2817).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import torch

from posttrain.bench.grpo_step import compose
from posttrain.bench.grpo_step_trainers import build


def _lora_params(trainer) -> dict[str, torch.nn.Parameter]:
    model = trainer.accelerator.unwrap_model(trainer.model)
    return {n: p for n, p in model.named_parameters() if "lora_" in n}


def _grad(trainer, inputs, autocast: bool) -> torch.Tensor:
    params = _lora_params(trainer)
    for p in params.values():
        p.grad = None
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return torch.cat([params[n].grad.float().flatten() for n in sorted(params)])


def _compare(name: str, g: torch.Tensor, ref: torch.Tensor) -> str:
    """cos(g, ref), |g| / |ref| and the component of g along ref relative to |ref| (below 1: a shrunk step)."""
    cos = float(torch.nn.functional.cosine_similarity(g, ref, dim=0))
    ratio = float(g.norm() / ref.norm())
    return f"{name:>28s}: cos {cos:.5f}  |g|/|g_ref| {ratio:.4f}  along g_ref {cos * ratio:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", action="append", default=[], help="posttrain with this override, compared too")
    args = parser.parse_args()
    base = ["+experiment=grpo_smollm2_add", f"seed={args.seed}", "trainer.progress_bar=false", "data.heldout=0"]
    with tempfile.TemporaryDirectory() as tmp:
        ours = build("posttrain", compose(base), Path(tmp) / "b")
        variants = {v: build("posttrain", compose([*base, v]), Path(tmp) / f"v{i}") for i, v in enumerate(args.variant)}
        anchor = build("trl", compose([*base, "model.dtype=float32"]), Path(tmp) / "a")
        ref = build("trl", compose([*base, "model.dtype=float32"]), Path(tmp) / "r")
        ref.accelerator.native_amp = False  # the fp32 reference: no autocast anywhere
        a_ours = {n: p for n, p in _lora_params(ours).items() if "lora_A" in n}
        a_anchor = {n: p for n, p in _lora_params(anchor).items() if "lora_A" in n}
        rounded = all(torch.equal(a_ours[n], a_anchor[n].bfloat16().float()) for n in a_ours)
        exact = all(torch.equal(a_ours[n], a_anchor[n]) for n in a_ours)
        print(
            f"LoRA A at init: posttrain's equals the anchor's {'exactly' if exact else ''}"
            f"{'rounded to bf16' if rounded and not exact else ''}{'' if rounded else 'NOT (a different draw)'}"
        )
        torch.manual_seed(args.seed)
        weights = {n: p.detach().clone() for n, p in _lora_params(ours).items()}
        for n, w in weights.items():
            if "lora_B" in n:
                weights[n] = torch.randn_like(w, dtype=torch.float32) * 2e-3
        for trainer in (ours, anchor, ref, *variants.values()):
            with torch.no_grad():
                for n, p in _lora_params(trainer).items():
                    p.copy_(weights[n])
            trainer.model.eval()  # no dropout (none configured); the same mode for all three
        data = anchor.train_dataset
        refs = []
        for b in range(args.batches):
            rows = [data[2 * b + i // 4] for i in range(8)]
            torch.manual_seed(1000 + b)
            inputs = anchor._generate_and_score_completions(rows)
            inputs["advantages"] = torch.tensor([1.0, -1.0] * 4)
            g_ref = _grad(ref, inputs, autocast=False)
            refs.append(g_ref)
            g_anchor = _grad(anchor, inputs, autocast=True)
            g_ours = _grad(ours, inputs, autocast=True)
            print(f"batch {b}")
            print(_compare("anchor (fp32+autocast)", g_anchor, g_ref))
            print(_compare("posttrain", g_ours, g_ref))
            print(_compare("posttrain vs anchor", g_ours, g_anchor))
            for v, trainer in variants.items():
                print(_compare(f"posttrain {v}", _grad(trainer, inputs, autocast=True), g_ref))
        cos = [
            float(torch.nn.functional.cosine_similarity(a, b, dim=0)) for i, a in enumerate(refs) for b in refs[i + 1 :]
        ]
        print(f"for scale: cos between the fp32 gradients of different batches: {[round(c, 3) for c in cos]}")


if __name__ == "__main__":
    main()
