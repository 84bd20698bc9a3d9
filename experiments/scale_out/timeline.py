"""train.py with a resident-set timeline: where in a step each process's memory peaks (how memory.py's missing
terms were found).

    TIMELINE_DIR=/tmp/tl python -m posttrain.launch --script experiments/scale_out/timeline.py hw=cpu \
        hw.num_devices=2 hw.accelerate_config=deepspeed_zero3 ...      # the overrides of memory.py's COMMON
    TIMELINE_DIR=/tmp/tl python experiments/scale_out/timeline.py ...  # one process

A thread samples the process's RSS every 5 ms; the trainer's phases (TRL's generation and rollout, the loss's
forward, accelerate's backward, the optimizer step, checkpoint saves) are marked at entry and exit by wrapping those
methods in this process only. At exit each process writes `$TIMELINE_DIR/rank<R>.json`: the largest RSS seen inside
each nest of phases ("train/training_step/backward") and every mark with the RSS then and the largest since the
previous mark. A measuring tool, not part of a run: nothing of it is imported by posttrain.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import resource
import runpy
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 1024**3
samples: list[tuple[float, int]] = []
marks: list[tuple[float, str, int]] = []


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _sample() -> None:
    while True:
        samples.append((time.monotonic(), rss()))
        time.sleep(0.005)


def mark(name: str) -> None:
    marks.append((time.monotonic(), name, rss()))


def wrap(owner: type, method: str, phase: str) -> None:
    inner = getattr(owner, method)

    @functools.wraps(inner)
    def marked(*args, **kwargs):
        mark(phase + ">")
        try:
            return inner(*args, **kwargs)
        finally:
            mark(phase + "<")

    setattr(owner, method, marked)


def summary() -> dict:
    points = sorted([(t, r, "") for t, r in samples] + [(t, r, n) for t, n, r in marks])
    open_phases: list[str] = []
    peaks: dict[str, int] = {}
    for _, r, name in points:
        if name.endswith(">"):
            open_phases.append(name[:-1])
        elif name.endswith("<") and name[:-1] in open_phases:
            open_phases.remove(name[:-1])
        nest = "/".join(open_phases) or "-"
        peaks[nest] = max(peaks.get(nest, 0), r)
    t0, rows, since = samples[0][0], [], samples[0][0]
    for t, name, r in marks:
        top = max([x for ts, x in samples if since <= ts <= t] + [r])
        rows.append((round(t - t0, 3), name, round(r / GIB, 3), round(top / GIB, 3)))
        since = t
    return {
        "rank": int(os.environ.get("RANK", "0")),
        "max_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 3),
        "peak_gib_by_phase": {k: round(v / GIB, 3) for k, v in sorted(peaks.items(), key=lambda kv: -kv[1])},
        "marks": rows,  # (seconds, phase> or phase<, RSS GiB then, largest RSS GiB since the previous mark)
    }


def _write() -> None:
    out = Path(os.environ.get("TIMELINE_DIR", "timeline"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(summary(), indent=1))


def main() -> None:
    import accelerate
    import transformers
    import trl
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    threading.Thread(target=_sample, daemon=True).start()
    for owner, method, phase in (
        (trl.GRPOTrainer, "_generate_single_turn", "generate"),
        (trl.GRPOTrainer, "_generate_and_score_completions", "rollout"),
        (trl.GRPOTrainer, "compute_loss", "loss_forward"),
        (accelerate.Accelerator, "backward", "backward"),
        (accelerate.Accelerator, "prepare", "prepare"),
        (transformers.Trainer, "train", "train"),
        (transformers.Trainer, "training_step", "training_step"),
        (transformers.Trainer, "_save_checkpoint", "save_checkpoint"),
        (transformers.Trainer, "_finalize_training", "finalize"),
        (transformers.trainer_callback.CallbackHandler, "on_train_end", "on_train_end"),
        (accelerate.Accelerator, "get_state_dict", "get_state_dict"),
    ):
        wrap(owner, method, phase)
    register_optimizer_step_pre_hook(lambda *_: mark("step>"))
    register_optimizer_step_post_hook(lambda *_: mark("step<"))
    atexit.register(_write)
    sys.argv = [str(ROOT / "train.py"), *sys.argv[1:]]
    runpy.run_path(str(ROOT / "train.py"), run_name="__main__")


if __name__ == "__main__":
    main()
