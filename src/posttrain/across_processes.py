"""Loss terms that mean the same on any number of processes (DDP, FSDP and ZeRO average gradients over processes).

A mean over this process's tokens is not the mean over the global batch's tokens when processes hold different
token counts (`token_weight`), and an in-batch contrastive term sees only this process's negatives unless the rows
of every process are gathered (`gathered_blocks`). On one process both are the identity.
"""

from __future__ import annotations

import torch


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def token_weight(count: int | torch.Tensor) -> float:
    """This process's share of every process's `count` (e.g. of answer tokens), times the number of processes: the
    factor that turns this process's token mean into its part of the global token mean (1.0 alone)."""
    world = _world()
    if world == 1:
        return 1.0
    import torch.distributed as dist

    mine = torch.as_tensor(count, dtype=torch.float64).reshape(1)
    total = mine.clone()
    dist.all_reduce(total)
    return float(mine) * world / float(total) if float(total) > 0 else 1.0


def gathered_blocks(x: torch.Tensor, n_blocks: int) -> tuple[torch.Tensor, int]:
    """Rows [block 0 | block 1 | ...] of every process, block by block in rank order ([all block 0 | all block 1 |
    ...]), and the number of processes. This process's rows keep their gradient; the others' are values (each
    process computes the whole-batch term and back-propagates into its own rows: `as_global_term`)."""
    world = _world()
    if world == 1:
        return x, 1
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[dist.get_rank()] = x
    b = x.shape[0] // n_blocks
    return torch.cat([p[i * b : (i + 1) * b] for i in range(n_blocks) for p in parts]), world


def as_global_term(term: torch.Tensor, world: int) -> torch.Tensor:
    """A whole-batch term computed alike on every process, with gradient through this process's rows only: its value
    unchanged, its gradient times `world`, so that the processes' gradients averaged are the whole term's."""
    return term if world == 1 else term + (world - 1) * (term - term.detach())
