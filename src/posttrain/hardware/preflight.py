"""Preflight for `mode=train`: the device is there, the launch matches `hw.num_devices`, the plan fits, and the run
dir's disk has room for the checkpoints the run keeps.

Refuses (a `UserError`: one line, non-zero exit) before any weights load; `hw.force=true` skips the memory check.
"""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from posttrain.dist import launch_hint, world_size
from posttrain.errors import UserError
from posttrain.hardware.memory import GIB

TORCH_XLA_HINT = (
    "hw=tpu needs torch_xla (PJRT): pip install 'torch_xla[tpu]' "
    "-f https://storage.googleapis.com/libtpu-releases/index.html (or pip install -e '.[tpu]')"
)


def check_device(cfg: DictConfig) -> None:
    hw = cfg.hw
    if hw.device == "xla" and importlib.util.find_spec("torch_xla") is None:
        raise UserError(TORCH_XLA_HINT)
    if hw.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                f"hw={hw.name} needs a CUDA device but torch.cuda.is_available() is False "
                "(hw=cpu to run here; mode=plan works anywhere)"
            )
    launch = launch_hint(cfg)
    if launch and world_size() <= 1:
        raise UserError(f"hw.num_devices={hw.num_devices}: start one process per device: {launch}")


def checkpoint_bytes(cfg: DictConfig, result) -> tuple[int, float]:
    """(checkpoints on disk at once, bytes of one): what trains in its own dtype plus the optimizer's states (the
    plan's), times the checkpoints `trainer.save_total_limit` keeps, one more while the oldest is rotated out."""
    t = cfg.trainer
    saves = -(-int(t.max_steps) // int(t.save_steps)) if t.save_steps else 1
    limit = t.save_total_limit
    at_once = saves if limit is None else min(saves, int(limit) + (1 if saves > int(limit) else 0))
    states = sum(i.bytes for i in result.items if i.name == "optimizer states") * int(cfg.hw.num_devices)
    trainable = result.counts.trainable_bytes + 4 * result.work.extra_trainable
    return at_once, float(trainable + states)


def check_disk(cfg: DictConfig, result) -> None:
    """UserError when the run dir's disk cannot hold the checkpoints the run keeps (a run that would fill the disk
    at its second save, after an hour)."""
    import shutil
    from pathlib import Path

    where = Path(str(cfg.get("run_dir") or ".")).absolute()
    while not where.exists():
        where = where.parent
    count, each = checkpoint_bytes(cfg, result)
    free = shutil.disk_usage(where).free
    if free < count * each:
        raise UserError(
            f"the disk of {where} has {free / GIB:.2f} GiB free; this run keeps {count} checkpoint"
            f"{'s' if count > 1 else ''} of {each / GIB:.2f} GiB (trainable weights and optimizer states): free "
            "space, lower trainer.save_total_limit or raise trainer.save_steps"
        )


def preflight(cfg: DictConfig) -> dict:
    """Check the device and the disk, and refuse a run the memory plan says cannot fit (`cfg`: hw profile applied)."""
    from posttrain.hardware.report import plan_summary

    check_device(cfg)
    result, summary = plan_summary(cfg)
    check_disk(cfg, result)
    if not result.fits and not cfg.hw.force:
        raise UserError(
            f"memory plan: peak {result.peak_bytes / GIB:.1f} GiB > {cfg.hw.device_gib:g} GiB on hw={cfg.hw.name} "
            f"({cfg.model.name}, {cfg.algo.name}); {summary['suggestion']} (hw.force=true to train anyway; "
            "mode=plan for the table)"
        )
    return summary
