"""`trainer.max_time_s` and `trainer.stop_step`: end training early, with a checkpoint at the stopping step.

For jobs with a hard time limit (a SLURM partition, a lent GPU): the run ends on its own, saves, and goes on to what
follows training (the end-of-run evaluation, summary.json) instead of being killed with nothing written. The
learning-rate schedule still spans `trainer.max_steps`, so `resume=auto` with the same run dir continues where the
budget ran out. The clock starts when training starts (model and data are already built). Under DDP rank 0 decides
and every rank stops at the same step. `trainer.stop_step` stops at a fixed step of the same schedule: it repeats a
run that the clock stopped (same steps, same learning rates) on a machine of another speed, or beside other jobs.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback


def _agreed(stop: bool) -> bool:
    """Rank 0's decision on every rank (ranks' clocks differ; a rank that stops alone hangs the others)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return stop
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    flag = torch.tensor([1 if stop else 0], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _stop(control) -> None:
    control.should_training_stop = True
    control.should_save = True
    control.should_log = True  # the last step's metrics, whatever logging_steps says


class WallClockLimit(TrainerCallback):
    """Ask the Trainer to log, save and stop after the first optimizer step that ends `max_seconds` after training
    began."""

    def __init__(self, max_seconds: float, clock=None):
        self.max_seconds = max_seconds
        self.clock = clock or time.monotonic
        self.start: float | None = None
        self.stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        if self.start is None or state.global_step >= state.max_steps:
            return
        if _agreed(self.clock() - self.start >= self.max_seconds):
            _stop(control)
            self.stopped_at = state.global_step
            if state.is_world_process_zero:
                print(
                    f"trainer.max_time_s={self.max_seconds:g} reached: stopping at step {state.global_step} of "
                    f"{state.max_steps} (checkpoint saved; resume=auto continues)",
                    flush=True,
                )


class StopAtStep(TrainerCallback):
    """Ask the Trainer to log, save and stop after optimizer step `step` of a longer schedule."""

    def __init__(self, step: int):
        self.step = step
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_at is None and self.step <= state.global_step < state.max_steps:
            _stop(control)
            self.stopped_at = state.global_step
            if state.is_world_process_zero:
                print(
                    f"trainer.stop_step={self.step}: stopping at step {state.global_step} of {state.max_steps}",
                    flush=True,
                )


class StopOnSignal(TrainerCallback):
    """SIGTERM (a scheduler's preemption, `kill`) or SIGINT (Ctrl-C) ends training after the current optimizer step,
    with a checkpoint, instead of killing it with nothing saved; a second SIGINT interrupts at once. The handlers
    are installed for training only and the previous ones restored after it (`restore`)."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self) -> None:
        self.received: str | None = None
        self.stopped_at: int | None = None
        self._previous: dict = {}

    def _handle(self, signum: int, frame: object) -> None:
        import signal

        name = signal.Signals(signum).name
        if self.received == "SIGINT" and name == "SIGINT":
            raise KeyboardInterrupt
        self.received = name
        print(f"{name}: stopping after this step with a checkpoint (SIGINT again: at once)", flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            return
        for name in self.SIGNALS:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._handle)

    def on_step_end(self, args, state, control, **kwargs):
        if _agreed(self.received is not None) and self.stopped_at is None:
            _stop(control)
            self.stopped_at = state.global_step
            if state.is_world_process_zero:
                print(
                    f"{self.received or 'a signal'}: stopped at step {state.global_step} of {state.max_steps} "
                    "(checkpoint saved; resume=auto continues)",
                    flush=True,
                )

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
