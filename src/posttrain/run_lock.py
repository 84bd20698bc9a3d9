"""One training process per run dir: an exclusive `flock` on `<run_dir>/train.lock`, which holds the holder's pid.

The lock belongs to the open file, so a process that dies (even by `kill -9`) releases it: there is no stale
lock to clean up. A second `python train.py` on the same run dir is refused in one line naming the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from posttrain.errors import UserError

LOCK_FILE = "train.lock"


def _refusal(run_dir: Path, lock: Path) -> UserError:
    holder = lock.read_text().strip() if lock.is_file() else "?"
    return UserError(
        f"{run_dir} is in use by another training process (pid {holder or '?'}): wait for it to finish, or choose "
        "another hydra.run.dir"
    )


@contextlib.contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run dir's lock for the block; UserError at once when another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(run_dir, lock) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_unlocked(run_dir: Path) -> None:
    """UserError when another process holds `run_dir`'s lock (without taking it: the command-line pre-check)."""
    lock = run_dir / LOCK_FILE
    if not lock.is_file():
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(run_dir, lock) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
