"""Interrupted checkpoints: a run SIGKILLed while writing checkpoint-2 keeps checkpoint-1 whole; `resume=auto` picks
the newest complete checkpoint, says which, and metrics.jsonl continues without duplicated or missing steps.

The killed run is a real process that goes through `slow_save_train.py` (train.py with a 60 s pause before
checkpoint-2 and later are marked complete), so the kill lands between "files being written" and "checkpoint
complete" every time. The resumed run is `train.py` in this interpreter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posttrain.checkpoints import COMPLETE_MARKER, complete_checkpoints, resolve_resume
from tests.conftest import run_cli
from tests.reliability.helpers import COMMON, ROOT, TINY, metrics

ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "PYTHONUNBUFFERED": "1",
    "OMP_NUM_THREADS": "1",
}


def _overrides(algo: str, run: Path, *extra: str) -> list[str]:
    return [*COMMON, *TINY[algo], "trainer.max_steps=4", "trainer.save_steps=1", *extra, f"hydra.run.dir={run}"]


def test_resume_auto_picks_newest_complete_checkpoint_and_says_which(tmp_path, capsys):
    ckpts = tmp_path / "checkpoints"
    for step, complete in ((1, True), (3, True), (5, False)):
        (ckpts / f"checkpoint-{step}").mkdir(parents=True)
        if complete:
            (ckpts / f"checkpoint-{step}" / COMPLETE_MARKER).write_text("{}")
    (ckpts / ".staging-7" / "checkpoint-7").mkdir(parents=True)  # a save killed before its rename
    (ckpts / ".staging-7" / "checkpoint-7" / COMPLETE_MARKER).write_text("{}")
    assert complete_checkpoints(ckpts) == [ckpts / "checkpoint-1", ckpts / "checkpoint-3"]
    assert resolve_resume("auto", tmp_path) == str(ckpts / "checkpoint-3")
    assert f"resume=auto: resuming from {ckpts / 'checkpoint-3'}" in capsys.readouterr().out
    assert resolve_resume("auto", tmp_path / "empty") is None
    assert "no complete checkpoint" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "contrastive", "d2l"])
def test_sigkill_while_saving_keeps_previous_checkpoint(algo, tmp_path):
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("slow_save_train.py")), *_overrides(algo, run)],
        cwd=ROOT,
        env=ENV,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 600
        while not (ckpts / ".staging-2").exists():
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.time() < deadline, "no .staging-2 in time"
            time.sleep(0.05)
        time.sleep(0.5)  # well inside the save (files written, COMPLETE not yet)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # the save in flight left only its staging dir; the previous checkpoint is whole
    assert (ckpts / ".staging-2").is_dir() and not (ckpts / "checkpoint-2").exists()
    assert complete_checkpoints(ckpts) == [ckpts / "checkpoint-1"]
    assert [m["step"] for m in metrics(run)] == [1, 2]  # step 2 was logged before its save was killed

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the killed process (OMP_NUM_THREADS=1)
    try:
        resumed = run_cli(*_overrides(algo, run, "resume=auto"))
    finally:
        torch.set_num_threads(before)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume=auto: resuming from {ckpts / 'checkpoint-1'}" in resumed.stdout
    assert [m["step"] for m in metrics(run)] == [1, 2, 3, 4]  # step 2 re-run once, not logged twice
    assert complete_checkpoints(ckpts)[-1] == ckpts / "checkpoint-4"
    assert not list(ckpts.glob(".staging-*"))  # the stale staging dir was cleared by the re-save of step 2
