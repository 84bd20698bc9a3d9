"""train.py whose rank 1 writes its checkpoint RNG state 5 s after the others (a rank slowed by load): the test
helper of tests/scale_out/test_checkpoint_ranks.py, run under `python -m posttrain.launch --script`."""

from __future__ import annotations

import time

from transformers import Trainer

_save_rng_state = Trainer._save_rng_state


def _late(self, output_dir: str) -> None:
    if self.args.process_index == 1:
        time.sleep(5)
    _save_rng_state(self, output_dir)


if __name__ == "__main__":
    from posttrain.cli import main

    Trainer._save_rng_state = _late
    main()
