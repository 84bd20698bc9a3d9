"""Atomic checkpoints, finding the one to resume from, and refusing to mix two runs in one directory.

A checkpoint is written into `checkpoints/.staging-<step>/checkpoint-<step>`, marked complete (`COMPLETE`,
written last) and only then renamed to `checkpoints/checkpoint-<step>`: a run killed mid-save leaves the previous
complete checkpoint, never a half-written one under the real name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posttrain.errors import CheckpointError

_CKPT = re.compile(r"^checkpoint-(\d+)$")
COMPLETE_MARKER = "COMPLETE"
IDENTITY_FILE = "run_identity.json"
MANIFEST_FILE = "MANIFEST.json"  # every file of a checkpoint with its size and sha256, written before COMPLETE
# checkpoints whose files this process has verified (path, whole-resume check, each file's name, size and mtime):
# a large one is hashed once
_VERIFIED: set[tuple[Path, bool, tuple[tuple[str, int, int], ...]]] = set()


def manifest(folder: Path) -> dict[str, dict]:
    """{relative path: {"bytes", "sha256"}} of every file in `folder` (the manifest and marker themselves aside)."""
    import hashlib

    out = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (MANIFEST_FILE, COMPLETE_MARKER)):
        digest = hashlib.sha256()
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        out[f.relative_to(folder).as_posix()] = {"bytes": f.stat().st_size, "sha256": digest.hexdigest()}
    return out


def complete_checkpoints(ckpt_root: Path) -> list[Path]:
    """`checkpoint-N` dirs holding a finished save, oldest first."""
    if not ckpt_root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_root.iterdir() if (m := _CKPT.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found) if (p / COMPLETE_MARKER).is_file()]


def identity(cfg) -> dict:
    """What makes a run dir one run: the model, the algorithm and the data."""
    return {"model": cfg.model.name, "algo": cfg.algo.name, "data": cfg.data.name}


if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    from transformers import Trainer as _TrainerBase
else:
    _TrainerBase = object


class AtomicCheckpointMixin(_TrainerBase):
    """Mix into any HF `Trainer` subclass (first in the bases) to make `_save_checkpoint` atomic."""

    _staging_dir: str | None = None

    def _get_output_dir(self, trial) -> str:
        return self._staging_dir or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        root = Path(super()._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = root / f".staging-{self.state.global_step}"
        shutil.rmtree(staging, ignore_errors=True)
        self._staging_dir = str(staging)
        try:
            super()._save_checkpoint(model, trial)
            if _fsdp_sharded_state(self):
                # HF saves FSDP's sharded state only: add the whole weights in the algorithm's own files (gathered
                # by every rank), so that one process can evaluate, export or sample from the checkpoint
                full = self.accelerator.get_state_dict(self.model)
                if self.args.should_save:
                    self._save(str(staging / name), state_dict=full)
            # every process writes files of its own (its RNG state last, after the engine's last collective): the
            # manifest and the rename wait for them, else a slow rank's file is left out and its resume draws anew
            self.accelerator.wait_for_everyone()
        finally:
            self._staging_dir = None
        if not self.args.should_save:
            return
        identity = root.parent / IDENTITY_FILE  # which (model, algo, data) wrote it: checked before a resume
        if identity.is_file():
            shutil.copyfile(identity, staging / name / IDENTITY_FILE)
        _write_atomic(staging / name / MANIFEST_FILE, json.dumps(manifest(staging / name), indent=1))
        _write_atomic(staging / name / COMPLETE_MARKER, json.dumps({"step": self.state.global_step}))
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging / name, final)
        shutil.rmtree(staging, ignore_errors=True)
        from transformers.trainer_utils import rotate_checkpoints

        rotate_checkpoints(str(root), self.args.save_total_limit, self.state.best_model_checkpoint)


def _fsdp_sharded_state(trainer: Any) -> bool:
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None) if trainer.is_fsdp_enabled else None
    return plugin is not None and "SHARDED" in str(plugin.state_dict_type)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def resolve_resume(resume: str | None, run_dir: Path, verbose: bool = True) -> str | None:
    """None (fresh start), the newest complete checkpoint of `run_dir` (auto), or a given checkpoint dir."""
    if resume is None:
        return None
    if resume == "auto":
        ckpts = complete_checkpoints(run_dir / "checkpoints")
        if not ckpts:
            if verbose:
                print(f"resume=auto: no complete checkpoint in {run_dir / 'checkpoints'}, starting fresh")
            return None
        newest_problem = None
        for ckpt in reversed(ckpts):  # a damaged newest one (truncated, a file missing) falls back to the one before
            try:
                verify_checkpoint(ckpt)
            except CheckpointError as ex:
                newest_problem = newest_problem or ex
                if verbose:
                    print(f"resume=auto: skipping {ckpt.name}, {ex}")
                continue
            if verbose:
                print(f"resume=auto: resuming from {ckpt}")
            return str(ckpt)
        raise CheckpointError(f"resume=auto: no checkpoint of {run_dir} is whole; the newest: {newest_problem}")
    path = Path(resume)
    if not path.is_dir():
        raise CheckpointError(f"resume={resume}: no such checkpoint directory")
    if not (path / COMPLETE_MARKER).is_file():
        raise CheckpointError(f"resume={resume}: incomplete checkpoint (no {COMPLETE_MARKER})")
    return str(path)


def finished_step(checkpoint: str | None, cfg) -> int | None:
    """The step a run ended at when `checkpoint` (the one `resume` resolved) is already at the run's last step
    (`trainer.stop_step`, else `trainer.max_steps`); None when there is training left (or no checkpoint)."""
    if checkpoint is None:
        return None
    state = Path(checkpoint) / "trainer_state.json"
    if not state.is_file():
        return None
    step = int(json.loads(state.read_text()).get("global_step", 0))
    last = int(cfg.trainer.get("stop_step") or 0) or int(cfg.trainer.max_steps)
    return step if step >= last else None


def finished_message(run_dir: Path, step: int, cfg) -> str:
    """The one line a finished run answers `resume=auto` with."""
    key = "trainer.stop_step" if cfg.trainer.get("stop_step") else "trainer.max_steps"
    last = cfg.trainer.get("stop_step") or cfg.trainer.max_steps
    return (
        f"resume=auto: {run_dir} finished at step {step} ({key}={last}): nothing to train (a larger {key} continues it)"
    )


def eval_checkpoint(cfg, run_dir: Path) -> Path | None:
    """What `mode=eval` scores, from `eval.checkpoint`: None for "init" (the starting weights), the newest complete
    checkpoint of `run_dir` for null, or the given checkpoint directory (complete and of this run's kind)."""
    which = cfg.eval.checkpoint
    if which == "init":
        return None
    if which is None:
        ckpts = complete_checkpoints(run_dir / "checkpoints")
        if not ckpts:
            raise CheckpointError(
                f"mode={cfg.mode}: no complete checkpoint in {run_dir / 'checkpoints'} "
                "(eval.checkpoint=<dir> names one; eval.checkpoint=init scores the starting weights)"
            )
        path = ckpts[-1]
    else:
        path = Path(which)
        if not path.is_dir():
            raise CheckpointError(f"eval.checkpoint={which}: no such checkpoint directory")
        if not (path / COMPLETE_MARKER).is_file():
            raise CheckpointError(f"eval.checkpoint={which}: incomplete checkpoint (no {COMPLETE_MARKER})")
    verify_checkpoint(path, identity(cfg), resuming=False)
    return path


def verify_checkpoint(path: str | Path, identity: dict | None = None, resuming: bool = True) -> None:
    """Refuse, in one line, a checkpoint that is damaged or was written by another (model, algo, data) run.

    Every file its `MANIFEST.json` lists must be there with the size and sha256 it was saved with (a missing
    adapter or optimizer state, or flipped bytes, is refused rather than resumed fresh; without `resuming`, for an
    evaluation or export, only the files present are checked); every safetensors file must
    parse and cover its whole file, every torch `.pt`/`.pth`/`.bin` must be a whole zip archive, every JSON file must
    parse; `run_identity.json` (copied into each checkpoint at save time, else
    the run dir's own) must match `identity` — a file is never "repaired" or skipped. Files verified once in this
    process (same names, sizes and modification times) are not hashed again.
    """
    path = Path(path)
    files = sorted(f for f in path.rglob("*") if f.is_file())
    seen = (
        path.resolve(),
        resuming,
        tuple((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files),
    )
    if seen not in _VERIFIED:
        _verify_files(path, files, resuming)
        _VERIFIED.add(seen)
    if identity is None:
        return
    for candidate in (path / IDENTITY_FILE, path.parent.parent / IDENTITY_FILE):
        if candidate.is_file():
            written = json.loads(candidate.read_text())
            diff = sorted(k for k in identity if written.get(k) != identity[k])
            if diff:
                got = ", ".join(f"{k}={written.get(k)}" for k in diff)
                want = ", ".join(f"{k}={identity[k]}" for k in diff)
                raise CheckpointError(f"checkpoint {path} was written by a run with {got}, this run has {want}")
            return


def _verify_files(path: Path, files: list[Path], resuming: bool) -> None:
    import zipfile

    from safetensors import safe_open

    for f in files:
        try:
            if f.suffix == ".safetensors":
                with safe_open(str(f), "pt"):
                    pass
            elif f.suffix in (".pt", ".pth", ".bin"):
                zipfile.ZipFile(f).close()
            elif f.suffix == ".json":
                json.loads(f.read_text())
        except Exception as ex:
            reason = str(ex).splitlines()[0] if str(ex) else type(ex).__name__
            raise CheckpointError(f"damaged checkpoint file {f} ({reason}): resume from another checkpoint") from None
    listed = path / MANIFEST_FILE
    if listed.is_file():  # written by posttrain at save time: every file there, whole and unchanged
        want, have = json.loads(listed.read_text()), manifest(path)
        missing = sorted(set(want) - set(have))
        if missing and resuming:  # scoring or exporting reads the weights only (a bundle may keep just those)
            raise CheckpointError(
                f"checkpoint {path} lacks {', '.join(missing)} (listed in its {MANIFEST_FILE}): resume from another "
                "checkpoint"
            )
        changed = sorted(k for k in want if k in have and want[k] != have[k])
        if changed:
            raise CheckpointError(
                f"checkpoint {path}: {', '.join(changed)} changed since it was saved (sha256 differs from "
                f"{MANIFEST_FILE}): resume from another checkpoint"
            )


def check_run_identity(
    run_dir: Path, identity: dict, resume: str | None, write: bool = True, auto: bool = False
) -> None:
    """A run dir belongs to one (model, algo, data) run: refuse to write a different one over it, or to start
    afresh over its checkpoints or metrics unless asked to continue it (`auto`: resume=auto was given)."""
    marker = run_dir / IDENTITY_FILE
    if marker.is_file():
        try:
            previous = json.loads(marker.read_text())
        except ValueError:
            raise CheckpointError(f"{marker} is damaged (not JSON): use a new hydra.run.dir") from None
        if previous != identity:
            diff = sorted(k for k in set(previous) | set(identity) if previous.get(k) != identity.get(k))
            raise CheckpointError(
                f"{run_dir} already holds a different run (differs in {', '.join(diff)}); use a new hydra.run.dir"
            )
    if resume is None and complete_checkpoints(run_dir / "checkpoints"):
        raise CheckpointError(f"{run_dir} already holds checkpoints: pass resume=auto or use a new hydra.run.dir")
    metrics = run_dir / "metrics.jsonl"
    if resume is None and not auto and metrics.is_file() and metrics.read_text().strip():
        raise CheckpointError(
            f"{run_dir} already holds a run's metrics.jsonl: pass resume=auto to continue it or use a new hydra.run.dir"
        )
    if resume is not None:
        verify_checkpoint(resume, identity)
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(identity, indent=2))
