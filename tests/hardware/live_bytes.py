"""Peak live tensor bytes on the CPU, the `torch.cuda.max_memory_allocated` of a CPU run.

    with LiveBytes() as live:
        loss = model(**batch).loss
        loss.backward()
    live.peak   # the most bytes that tensors created inside the block held at once

A `TorchDispatchMode` sees every tensor an aten op creates (forward, autograd's backward, optimizer), counts its
storage once, and un-counts it when the storage is freed (a finalizer on the storage's Python object, which
torch keeps alive exactly as long as the storage). Tensors that existed before the block (weights, the batch)
are not counted: `peak` is the increment over what was resident when the block started.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage(t: Any) -> torch.UntypedStorage | None:
    """The CPU storage of `t`; None for non-tensors, other devices and storage-less tensors (oneDNN-packed)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_mkldnn:
        return None
    try:
        return t.untyped_storage()
    except NotImplementedError:
        return None


class LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._counted: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._counted.discard(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {_storage(t).data_ptr() for t in tree_flatten((args, kwargs))[0] if _storage(t) is not None}
        for t in tree_flatten(out)[0]:
            storage = _storage(t)
            if storage is None:
                continue
            key = id(storage)
            if key in self._counted or storage.data_ptr() in inputs:  # a view or an in-place result: not new
                continue
            self._counted.add(key)
            nbytes = storage.nbytes()
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._release, key, nbytes)
        return out
