"""Import each named posttrain module on its own (test helper for tests/test_structure.py).

This interpreter imports the heavy third-party libraries once (torch, transformers, peft, trl, datasets,
accelerate, hydra: about 5 s) and no posttrain module; each module is then imported in a child forked from it, so every
import starts with no posttrain module loaded, as in a fresh `python -c "import <module>"`, without paying those
seconds again for each of the package's ~120 modules. Two children run at a time. Prints one JSON line:
{module: the end of its traceback} for the modules that failed.

    python tests/import_alone.py posttrain.run posttrain.algos.grpo.trainer ...
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

PRELOAD = ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "hydra", "omegaconf")
WORKERS = 2


def _child(name: str, out: int) -> None:
    code = 0
    try:
        importlib.import_module(name)
    except BaseException:
        os.write(out, traceback.format_exc()[-1500:].encode())
        code = 1
    os._exit(code)  # no atexit handlers, no flush of the parent's buffers


def main(names: list[str]) -> dict[str, str]:
    for lib in PRELOAD:
        importlib.import_module(lib)
    loaded = sorted(m for m in sys.modules if m == "posttrain" or m.startswith("posttrain."))
    assert not loaded, f"posttrain modules loaded before the children fork: {loaded}"
    sys.stdout.flush()
    sys.stderr.flush()
    failures: dict[str, str] = {}
    running: dict[int, tuple[str, int]] = {}
    todo = list(names)
    while todo or running:
        while todo and len(running) < WORKERS:
            name = todo.pop(0)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _child(name, write)
            os.close(write)
            running[pid] = (name, read)
        pid, status = os.wait()
        name, read = running.pop(pid)
        with os.fdopen(read) as pipe:
            err = pipe.read()
        if status:
            failures[name] = err or f"wait status {status}"
    return failures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
