"""What a sharded engine holds per process beyond its shards of weights, gradients and optimizer states.

The shards themselves are `posttrain.hardware.memory`'s (weights, gradients and states divided by the number of
processes as `posttrain.hardware.sharding` says); this module adds the buffers each engine allocates around them,
read from the engines' code (torch 2.13 `fully_shard`, DeepSpeed 0.19) and checked against the per-process peak
RSS of 2-process CPU runs (experiments/scale_out/memory.py):

- FSDP2 (`fully_shard` per decoder layer and on the root, `fsdp_reshard_after_forward: true`): the root's
  parameters (embedding, output projection, final norm) are all-gathered whole for each forward and for the whole
  backward, and so are the decoder layer being run and the one prefetched next; the root's gradients stay whole
  until its reduce-scatter at the very end of the backward.
- DeepSpeed ZeRO-2/3 with the defaults conf/accelerate/deepspeed_zero*.yaml keep: gradients are copied into a
  reduce bucket of `reduce_bucket_size` elements (kept from the first backward on; on a CPU only the part gradients
  are written into is resident), and ZeRO-2/3 keep an fp32 gradient partition beside the fp32 master partition.
  ZeRO-3 also keeps gathered parameters alive between their uses up to `stage3_max_live_parameters` (with
  `stage3_max_reuse_distance` as large, every parameter a forward and its backward touch stays gathered), its
  reduce-scatter concatenates the bucket's gradients into one more buffer of that size, and TRL gathers every
  parameter for generation (`ds3_gather_for_generation`).
- Saving a checkpoint, FSDP2 (the whole weights beside the sharded state: `posttrain.checkpoints`) and ZeRO-3
  (`zero3_save_16bit_model`) gather the whole weights into host memory on rank 0, tensor by tensor: on a CPU that
  is the memory the run trains in, on CUDA it is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posttrain.hardware.params import ParamCounts
from posttrain.hardware.sharding import engine_of

# DeepSpeed 0.19's zero_optimization defaults (deepspeed/runtime/zero/config.py), which the configs leave unset
REDUCE_BUCKET_SIZE = 500_000_000
MAX_LIVE_PARAMETERS = 1_000_000_000


@dataclass(frozen=True)
class EngineItem:
    name: str
    bytes: float
    phase: str  # persistent | train | score | generate | step | save | forward | backward+step
    note: str


def engine_items(hw: DictConfig, counts: ParamCounts, layers: int, full: bool, grad_bytes: float) -> list[EngineItem]:
    """The engine's own buffers per process (`full`: the base model trains; `grad_bytes`: bytes per gradient under
    FSDP2, which keeps the parameters' own dtypes)."""
    engine = engine_of(hw)
    n = max(int(hw.num_devices), 1)
    weight_bytes = float(counts.weight_bytes)
    saved: list[EngineItem] = []
    if engine in ("fsdp", "zero3") and hw.device == "cpu":
        largest = max(counts.embedding, counts.lm_head) * counts.dtype_bytes
        saved.append(
            EngineItem(
                "whole weights (checkpoint)",
                weight_bytes + largest,
                "save",
                "rank 0 gathers the whole weights into host memory to save them, one tensor at a time",
            )
        )
    if engine == "fsdp":
        root_params = counts.embedding + counts.lm_head
        root = root_params * counts.dtype_bytes
        layer = (weight_bytes - root) / max(layers, 1)
        items = [
            EngineItem(
                "gathered parameters",
                root + 2 * layer,
                "forward",
                "FSDP2: the root (embedding, output projection) whole, the running and the prefetched layer",
            )
        ]
        if full:
            items.append(
                EngineItem(
                    "unsharded root gradients",
                    root_params * grad_bytes * (1 - 1 / n),
                    "train",
                    "FSDP2: the root's gradients are whole until its reduce-scatter, after the embedding's backward",
                )
            )
        return items + saved
    if engine not in ("zero2", "zero3"):
        return []
    trainable = counts.trainable
    elem = counts.dtype_bytes  # DeepSpeed holds the whole module, adapters too, in the run's precision
    resident = hw.device != "cuda"  # a CPU counts the pages written; CUDA's allocator reserves the whole bucket
    bucket = (min(REDUCE_BUCKET_SIZE, trainable) if resident else REDUCE_BUCKET_SIZE) * elem
    # ZeRO-2 frees both after the optimizer step; ZeRO-3 keeps them from the first backward on
    kept = "persistent" if engine == "zero3" else "backward+step"
    items = [
        EngineItem("gradient partition", trainable * 4 / n, kept, "DeepSpeed: fp32 gradients of the shard"),
        EngineItem(
            "reduce bucket",
            bucket,
            kept,
            f"DeepSpeed: reduce_bucket_size {REDUCE_BUCKET_SIZE:.0e} elements"
            + (" (the part gradients fill)" if resident else ""),
        ),
    ]
    if engine == "zero3":
        total = counts.total
        live = min(MAX_LIVE_PARAMETERS, total) * counts.dtype_bytes
        items += [
            EngineItem(
                "gathered parameters",
                live,
                "train",
                f"ZeRO-3: gathered parameters stay live up to stage3_max_live_parameters ({MAX_LIVE_PARAMETERS:.0e})",
            ),
            EngineItem("gathered parameters", live, "score", "ZeRO-3: as in the training forward"),
            EngineItem("gathered for generation", weight_bytes, "generate", "TRL gathers every parameter to generate"),
            EngineItem(
                "reduce-scatter input",
                min(REDUCE_BUCKET_SIZE, trainable) * elem,
                "train",
                "ZeRO-3: the bucket's gradients concatenated once more",
            ),
        ]
    return items + saved
