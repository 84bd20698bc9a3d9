"""`train.py` whose checkpoints from step 2 on pause 60 s before they are marked complete: lets a test kill a run
mid-save (checkpoint-1 is saved at full speed: the test keeps it and kills the save of checkpoint-2)."""

import time
from pathlib import Path

import posttrain.checkpoints as checkpoints
from posttrain.cli import main

_write_atomic = checkpoints._write_atomic


def _slow_write_atomic(path: Path, text: str) -> None:
    if path.name == checkpoints.COMPLETE_MARKER and int(path.parent.name.rsplit("-", 1)[1]) >= 2:
        time.sleep(60)
    _write_atomic(path, text)


checkpoints._write_atomic = _slow_write_atomic

if __name__ == "__main__":
    main()
