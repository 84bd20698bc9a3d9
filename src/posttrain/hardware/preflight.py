"""Preflight for `mode=train`: the device is there, the launch matches `hw.num_devices`, and the plan fits.

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


def preflight(cfg: DictConfig) -> dict:
    """Check the device and refuse a run the memory plan says cannot fit (`cfg`: hw profile applied)."""
    from posttrain.hardware.report import plan_summary

    check_device(cfg)
    result, summary = plan_summary(cfg)
    if not result.fits and not cfg.hw.force:
        raise UserError(
            f"memory plan: peak {result.peak_bytes / GIB:.1f} GiB > {cfg.hw.device_gib:g} GiB on hw={cfg.hw.name} "
            f"({cfg.model.name}, {cfg.algo.name}); {summary['suggestion']} (hw.force=true to train anyway; "
            "mode=plan for the table)"
        )
    return summary
