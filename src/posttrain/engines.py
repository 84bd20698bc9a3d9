"""The distributed engine a run trains under (DDP, FSDP2, DeepSpeed ZeRO), and FSDP2 and ZeRO on CPU processes.

accelerate 1.x sets a CPU process group up as `MULTI_CPU`, and only a device process group (CUDA, XPU, ...) becomes
FSDP or DeepSpeed: on CPU an FSDP or ZeRO config file would quietly run DDP. Both engines do run on CPU (torch's
`fully_shard` on a CPU mesh over gloo; DeepSpeed's CPU accelerator, `DS_ACCELERATOR=cpu`), so `start_cpu_engine`
starts the process group over gloo and configures accelerate's state before HF `TrainingArguments` reads it
(`accelerator_config.use_configured_state`): accelerate then prepares the model with the engine the config file
names, as it would on GPUs.
"""

from __future__ import annotations

import os
from typing import Any

from posttrain.dist import world_size

ENGINE_ENV = {"fsdp": "ACCELERATE_USE_FSDP", "deepspeed": "ACCELERATE_USE_DEEPSPEED"}
_started: list[str] = []


def launched_engine() -> str | None:
    """The sharded engine `accelerate launch` was given a config file for (its environment says): fsdp | deepspeed."""
    for engine, var in ENGINE_ENV.items():
        if os.environ.get(var, "false").lower() == "true":
            return engine
    return None


def start_cpu_engine(device: str) -> str | None:
    """On CPU processes of a multi-process FSDP/DeepSpeed launch: start gloo and accelerate's state for that engine.

    Returns the engine started (then `TrainingArguments` must use the configured state), or None where nothing is
    needed (one process, a GPU, or DDP)."""
    engine = launched_engine()
    if device != "cpu" or world_size() <= 1 or engine is None:
        return None
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"  # accelerate's device for this process
    if engine == "deepspeed":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed.comm

        if not deepspeed.comm.is_initialized():
            deepspeed.comm.init_distributed("gloo", auto_mpi_discovery=False)
    elif not dist.is_initialized():
        dist.init_process_group("gloo")
    state = PartialState(cpu=False, backend="gloo")  # cpu=False: MULTI_CPU would never become FSDP or DeepSpeed
    if engine == "fsdp":
        # accelerate turns a device process group into FSDP when the plugin arrives (AcceleratorState); gloo on CPU
        # is such a group for fully_shard
        PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
    assert state.num_processes == world_size()
    _started.append(engine)
    return engine


def shards_parameters(trainer: Any) -> bool:
    """Whether `trainer`'s parameters are sharded over its processes (FSDP, ZeRO-3): then no process holds a whole
    model to evaluate with, and one process evaluates from the checkpoint's whole weights (`mode=eval`)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return plugin is not None and int(plugin.zero_stage) == 3


def started_engine() -> str | None:
    """The engine `start_cpu_engine` configured in this process (TrainingArguments then takes accelerate's state)."""
    return _started[-1] if _started else None
