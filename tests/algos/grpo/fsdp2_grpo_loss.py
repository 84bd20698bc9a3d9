"""GRPO loss (TRL path or kernel path) under FSDP2 (`fully_shard`, gloo on CPU) vs one process (test helper; 2 ranks).

Every rank builds the same tiny trainer as a single process (accelerate never sees the launcher's variables), draws
the same batch and computes the full-batch loss and LoRA gradients unsharded as the reference. Then the model is
sharded with FSDP2 across both ranks, each rank takes half of the batch, runs `_compute_loss` on the sharded
model and backpropagates; FSDP averages the gradients. Rank 0 prints one JSON line comparing them, per kernel
backend of the comma-separated list (one launch for all of them: each launch costs two interpreters' imports).

    python -m torch.distributed.run --nproc_per_node 2 tests/algos/grpo/fsdp2_grpo_loss.py <tmp_dir> trl,eager,fused
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

DIST_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def main(tmp: Path, kernels: list[str]) -> None:
    env = {k: os.environ.pop(k) for k in DIST_ENV if k in os.environ}  # build single-process trainers
    from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora

    cases = []
    for backend in kernels:  # every reference first, before the process group exists
        trainer = make_trainer(
            tmp / env["RANK"] / backend, f"kernels={backend}", "algo.trl.beta=0.1", "algo.trl.num_iterations=2"
        )
        inputs = first_batch(trainer)
        perturb_lora(trainer.model, scale=0.3)
        model = trainer.model
        trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        trainer._compute_loss(model, inputs).backward()
        ref = {n: p.grad.clone() for n, p in trainable.items()}
        model.zero_grad(set_to_none=True)
        cases.append((backend, trainer, inputs, ref))

    os.environ.update(env)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    for backend, trainer, inputs, ref in cases:
        model = trainer.model
        lm = model.get_base_model()
        for layer in lm.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        rows = inputs["completion_ids"].size(0) // world
        part = {
            k: (v[rank * rows : (rank + 1) * rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v)
            for k, v in inputs.items()
        }
        trainer._compute_loss(model, part).backward()
        worst, norm = 0.0, 0.0
        for n, p in model.named_parameters():
            if not p.requires_grad:
                continue
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            r = ref[n]
            worst = max(worst, float((g - r).abs().max() / r.abs().max().clamp(min=1e-12)))
            norm += float(r.pow(2).sum())
        if rank == 0:
            print(
                json.dumps(
                    {
                        "kernels": backend,
                        "max_rel_grad_err": worst,
                        "ref_grad_norm": norm**0.5,
                        "sharded": type(lm.model.layers[0]).__name__,
                    }
                ),
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2].split(","))
