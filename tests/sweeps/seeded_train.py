"""`train.py` with sampling that does not depend on how the batch is split across processes (test helper).

GRPO samples its completions on each rank from the rank's own RNG stream, so a 2-process run and a 1-process
run with the same global batch draw different completions and their losses cannot be compared. Here every
generated row samples with the Gumbel-max trick from its own generator, seeded by (generate call, global row
index), where the global row is RANK * local_rows + local_row (TRL shards the generation batch contiguously by
rank). Gumbel-max samples exactly from softmax(logits), so this is still GRPO's sampling, only reproducible per
row: both layouts draw the same completions, and everything downstream (rewards gathered across ranks, group
advantages, loss, DDP gradient averaging, the optimizer step) has to agree for the metrics to match. After
training each rank prints one JSON line saying how it was distributed (accelerate's type, the model wrapper).

    accelerate launch --config_file conf/accelerate/ddp.yaml --num_processes 2 tests/sweeps/seeded_train.py ...

The one-process runs the tests compare with run in the test's interpreter under `seeded()` (no launch needed).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterator

import torch
from transformers import GenerationMixin, LogitsProcessor, LogitsProcessorList, Trainer


class RowSeededGumbel(LogitsProcessor):
    def __init__(self, call: int, offset: int, rows: int, seed: int = 1234):
        self.generators = [torch.Generator().manual_seed(seed + 1_000_003 * call + offset + r) for r in range(rows)]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = torch.full_like(scores, float("-inf"))
        for row, gen in enumerate(self.generators):
            u = torch.rand(scores.size(-1), generator=gen, dtype=torch.float64).clamp_(1e-12, 1 - 1e-12)
            gumbel = -torch.log(-torch.log(u))
            choice = int(torch.argmax(scores[row].double().cpu() + gumbel))
            out[row, choice] = 0.0
        return out


_calls = itertools.count()
_generate = GenerationMixin.generate
_train = Trainer.train


def _seeded_generate(self, *args, **kwargs):
    input_ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
    rows = input_ids.shape[0]
    proc = RowSeededGumbel(next(_calls), int(os.environ.get("RANK", "0")) * rows, rows)
    kwargs["logits_processor"] = LogitsProcessorList([proc, *(kwargs.get("logits_processor") or [])])
    return _generate(self, *args, **kwargs)


def _train_and_report(self, *args, **kwargs):
    """Also print how the run was distributed (one JSON line per rank), for the test to assert on, and write the
    trainable weights before and after (gathered from every rank's shards) to `<output_dir>/initial.safetensors` and
    `trained.safetensors`."""
    from safetensors.torch import save_file

    if self.accelerator.is_main_process:  # the weights before training (the same on every rank: seeded)
        first = {n: p.detach().float().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        os.makedirs(self.args.output_dir, exist_ok=True)
        save_file(first, os.path.join(self.args.output_dir, "initial.safetensors"))
    out = _train(self, *args, **kwargs)
    wrapped = self.model_wrapped
    trainable = {n.removeprefix("module.") for n, p in self.model.named_parameters() if p.requires_grad}
    full = self.accelerator.get_state_dict(wrapped)  # every rank takes part; rank 0 gets the whole dict
    if self.accelerator.is_main_process:
        kept = {k: v.detach().float().cpu().contiguous() for k, v in full.items() if k in trainable}
        assert kept, sorted(full)[:5]
        save_file(kept, os.path.join(self.args.output_dir, "trained.safetensors"))
    print(
        json.dumps(
            {
                "rank": int(os.environ.get("RANK", "0")),
                "distributed_type": str(self.accelerator.distributed_type),
                "wrapped": type(wrapped).__name__,
                "num_processes": self.accelerator.num_processes,
            }
        ),
        flush=True,
    )
    return out


def install() -> None:
    """Patch generation and training as this script runs them; the generate calls are counted from 0."""
    global _calls
    _calls = itertools.count()
    GenerationMixin.generate = _seeded_generate
    Trainer.train = _train_and_report


@contextlib.contextmanager
def seeded() -> Iterator[None]:
    """The one-process run in the test's own interpreter: the patches for the duration, one CPU thread (as each
    launched rank has), then everything as it was."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    install()
    try:
        yield
    finally:
        GenerationMixin.generate = _generate
        Trainer.train = _train
        torch.set_num_threads(threads)


if __name__ == "__main__":
    from posttrain.cli import main

    install()
    main()
