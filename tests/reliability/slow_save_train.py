"""`train.py` whose checkpoints pause 3 s before they are marked complete: lets a test kill a run mid-save."""

import time
from pathlib import Path

import posttrain.checkpoints as checkpoints
from posttrain.cli import main

_write_atomic = checkpoints._write_atomic


def _slow_write_atomic(path: Path, text: str) -> None:
    if path.name == checkpoints.COMPLETE_MARKER:
        time.sleep(3)
    _write_atomic(path, text)


checkpoints._write_atomic = _slow_write_atomic

if __name__ == "__main__":
    main()
