"""A checkpoint of a multi-process run holds every process's files before it is declared complete: rank 1 writes
its RNG state late (tests/scale_out/late_rank_train.py) and is still in the checkpoint and its manifest, so that its
resume draws what the uninterrupted run draws (without it, HF resumes that rank with fresh RNG, saying so only at
INFO level)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from posttrain.checkpoints import COMPLETE_MARKER, MANIFEST_FILE

HELPER = Path(__file__).with_name("late_rank_train.py")
QUICK = (
    "model=tiny_llama",
    "trainer.max_steps=1",
    "trainer.save_steps=1",
    "trainer.per_device_batch_size=2",
    "algo.trl.num_generations=2",
    "algo.trl.max_completion_length=4",
    "data.num_train=8",
    "trainer.progress_bar=false",
    "algo.heldout=0",
)


def test_a_late_ranks_files_are_in_the_checkpoint_and_its_manifest(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "posttrain.launch", "--script", str(HELPER), "hw=cpu", "hw.num_devices=2", *QUICK]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, f"hydra.run.dir={run}"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (checkpoint,) = (run / "checkpoints").glob("checkpoint-*")
    assert (checkpoint / COMPLETE_MARKER).is_file()
    listed = json.loads((checkpoint / MANIFEST_FILE).read_text())
    for name in ("rng_state_0.pth", "rng_state_1.pth"):
        assert (checkpoint / name).is_file() and name in listed
    assert listed["rng_state_1.pth"]["bytes"] == (checkpoint / "rng_state_1.pth").stat().st_size
