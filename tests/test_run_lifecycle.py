"""A run's lifecycle: a finished run answers `resume=auto` by saying so and training nothing; one training process
per run dir (a second is refused in one line naming the holder, before anything is written)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from posttrain.checkpoints import finished_step
from posttrain.config.compose import load_config
from posttrain.run_lock import check_unlocked
from tests.conftest import ROOT, run_cli

TINY = (
    "trainer.max_steps=2",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=4",
    "trainer.progress_bar=false",
)


def _files(run):
    return {
        p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != "train.lock"
    }


def test_a_finished_run_trains_nothing_on_resume_auto(tmp_path):
    run = tmp_path / "run"
    proc = run_cli(*TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    before = _files(run)
    assert (run / "checkpoints" / "checkpoint-2").is_dir()
    proc = run_cli(*TINY, "resume=auto", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resume=auto: {run} finished at step 2 (trainer.max_steps=2): nothing to train" in proc.stdout
    assert _files(run) == before  # no step 3, no new summary, no checkpoint rotated away, no .hydra rewrite
    # a larger max_steps continues it
    longer = load_config([*TINY[1:], "trainer.max_steps=3"])
    assert finished_step(str(run / "checkpoints" / "checkpoint-2"), longer) is None
    assert finished_step(str(run / "checkpoints" / "checkpoint-2"), load_config(list(TINY))) == 2


def test_a_second_process_on_one_run_dir_is_refused(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from posttrain.run_lock import run_dir_lock\n"
            "with run_dir_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)",
            str(run),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = run_cli(*TINY, f"hydra.run.dir={run}")
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert lines == [
            f"error: {run} is in use by another training process (pid {holder.pid}): wait for it to finish, or "
            "choose another hydra.run.dir"
        ]
        assert sorted(p.name for p in run.iterdir()) == ["train.lock"]  # nothing written: no .hydra, no config
    finally:
        holder.kill()
        holder.wait()
    deadline = time.time() + 10
    while time.time() < deadline:  # a killed holder releases the lock with its file descriptor
        try:
            check_unlocked(run)
            break
        except Exception:
            time.sleep(0.1)
    check_unlocked(run)


def test_sigterm_saves_a_checkpoint_and_exits_with_one_line(tmp_path):
    """SIGTERM (preemption) used to exit with no message and nothing saved (save_steps=0): now the step finishes,
    a checkpoint is written, the run ends with one line, and resume=auto continues from it."""
    import json
    import os
    import signal

    run = tmp_path / "run"
    metrics = run / "metrics.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *TINY[1:], "trainer.max_steps=500", f"hydra.run.dir={run}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    stopped = [ln for ln in out.splitlines() if ln.startswith("SIGTERM: stopped at step")]
    assert len(stopped) == 1, out[-2000:]
    step = int(stopped[0].split("step ")[1].split()[0])
    assert 2 <= step < 500 and (run / "checkpoints" / f"checkpoint-{step}" / "COMPLETE").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by_signal"] == {"signal": "SIGTERM", "step": step}
    again = run_cli(
        *TINY[1:], "trainer.max_steps=500", f"trainer.stop_step={step + 1}", "resume=auto", f"hydra.run.dir={run}"
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming from {run / 'checkpoints' / f'checkpoint-{step}'}" in again.stdout
    assert json.loads((run / "summary.json").read_text())["final_step"] == step + 1


def test_a_wandb_offline_run_holds_the_composed_config_and_the_summary(tmp_path, monkeypatch):
    """W&B used to get TRL's arguments only: the run now also holds posttrain's config as it ran (the profile's
    kernel, not the default) and summary.json's numbers, named after the run dir and tagged with the overrides."""
    import json

    for key in ("WANDB_NAME", "WANDB_RUN_GROUP", "WANDB_TAGS", "WANDB_DIR", "WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    run = tmp_path / "wbrun"
    proc = run_cli(*TINY, "logger=wandb", "logger.wandb_mode=offline", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    data = record.read_bytes()  # the run's protobuf records: config and summary values are JSON strings in it
    summary = json.loads((run / "summary.json").read_text())
    assert b'"kernels":{"backend":"fused"}' in data  # hw=cpu's kernel: the config as it ran (the default is trl)
    assert b"reward_last5_mean" in data and json.dumps(summary["reward_last5_mean"]).encode() in data
    assert b"wbrun" in data and b"trainer.max_steps=2" in data  # run name and tags


def test_a_checkpoint_missing_a_file_or_with_flipped_bytes_is_refused(tmp_path):
    """A GRPO checkpoint without adapter_model.safetensors resumed silently from fresh adapters, and flipped bytes in
    a tensor payload loaded silently: each checkpoint's MANIFEST.json (size and sha256 of every file) refuses both."""
    import shutil

    run = tmp_path / "run"
    assert run_cli(*TINY, f"hydra.run.dir={run}").returncode == 0
    ckpt = run / "checkpoints" / "checkpoint-2"
    assert {"adapter_model.safetensors", "optimizer.pt"} <= set(json.loads((ckpt / "MANIFEST.json").read_text()))
    for damage, needle in (
        ("missing", "lacks adapter_model.safetensors (listed in its MANIFEST.json)"),
        ("flipped", "adapter_model.safetensors changed since it was saved"),
    ):
        copy = tmp_path / damage
        shutil.copytree(run, copy)
        adapter = copy / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
        if damage == "missing":
            adapter.unlink()
        else:
            data = bytearray(adapter.read_bytes())
            data[-8] ^= 0xFF  # inside the last tensor's payload: the file still parses
            adapter.write_bytes(bytes(data))
        proc = run_cli(*TINY[1:], "trainer.max_steps=3", "resume=auto", f"hydra.run.dir={copy}")
        assert proc.returncode == 2, proc.stdout[-1000:]
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_resume_auto_falls_back_from_a_damaged_newest_checkpoint(tmp_path):
    """A truncated newest checkpoint was refused in one line although the one before it was whole: resume=auto now
    says which one it skips and why, resumes from the previous one, and leaves the damaged one as it is."""
    run = tmp_path / "run"
    assert run_cli(*TINY, "trainer.save_steps=1", f"hydra.run.dir={run}").returncode == 0
    newest = run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    damaged = newest.read_bytes()[:-100]
    newest.write_bytes(damaged)  # truncated mid-payload
    proc = run_cli(*TINY[1:], "trainer.max_steps=3", "trainer.save_steps=1", "resume=auto", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resume=auto: skipping checkpoint-2, damaged checkpoint file" in proc.stdout
    assert f"resume=auto: resuming from {run / 'checkpoints' / 'checkpoint-1'}" in proc.stdout
    assert json.loads((run / "summary.json").read_text())["final_step"] == 3
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [2, 3]  # step 2 trained again from checkpoint-1


def test_resume_auto_with_no_whole_checkpoint_is_one_line(tmp_path):
    from posttrain.checkpoints import resolve_resume
    from posttrain.errors import CheckpointError

    ckpt = tmp_path / "checkpoints" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{not json")
    (ckpt / "COMPLETE").write_text("")
    with pytest.raises(CheckpointError, match=r"^resume=auto: no checkpoint of .* is whole; the newest: damaged"):
        resolve_resume("auto", tmp_path, verbose=False)


def test_a_full_disk_is_one_line_at_start_and_mid_save(tmp_path, monkeypatch):
    """ENOSPC at start was Hydra's traceback and mid-save torch's `file write failed`: now one line each, the
    second naming the checkpoint that is still whole; resume=auto continues from it once space is back."""
    import errno
    from collections import namedtuple

    import torch

    import posttrain.inputs

    run = tmp_path / "run"
    usage = namedtuple("usage", "total used free")
    with monkeypatch.context() as m:
        m.setattr(posttrain.inputs.shutil, "disk_usage", lambda _: usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
        proc = run_cli(*TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 2 and not run.exists(), proc.stderr[-2000:]
    assert (
        proc.stderr.strip() == f"error: hydra.run.dir={run}: 1 MiB free on its disk; a run writes its config, "
        "metrics and checkpoints there (at least 100 MiB)"
    )

    real_save, calls = torch.save, []

    def fills_the_disk(obj, f, *args, **kwargs):
        calls.append(str(f))
        if "checkpoint-2" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(torch, "save", fills_the_disk)
        proc = run_cli(*TINY, "trainer.save_steps=1", f"hydra.run.dir={run}")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert (
        lines[0].startswith(f"error: the disk of {run} is full (")
        and "at step 2: the newest complete checkpoint, checkpoint-1, is whole" in lines[0]
    )
    proc = run_cli(*TINY, "trainer.save_steps=1", "resume=auto", f"hydra.run.dir={run}")
    assert proc.returncode == 0 and f"resuming from {run / 'checkpoints' / 'checkpoint-1'}" in proc.stdout
