"""Per-phase timing of a GRPO optimizer step, by wrapping a `GRPOTrainer` instance's methods (no library patches).

    timer = StepTimer.attach(trainer)   # before trainer.train()
    trainer.train(); timer.steps        # one dict per optimizer step

Phases (seconds, per optimizer step; every trainer, TRL's or posttrain's, is instrumented the same way):
- `generation`: `trainer._generate` (chat template, sampling with `generate`, decoding);
- `scoring`: `_get_per_token_logps_and_entropies` calls made inside `_generate_and_score_completions` (the old and
  reference log-prob passes, under no_grad; zero when TRL skips them);
- `rewards`: `_calculate_rewards`;
- `loss_backward`: `training_step` minus the `_prepare_inputs` inside it (policy forward, loss, backward);
- `optimizer`: from the end of the step's last `training_step` to `on_step_end` (gradient clipping,
  `optimizer.step`, scheduler, `zero_grad`);
- `other`: the rest of the step: advantages, padding and bookkeeping inside `_prepare_inputs`, plus the logging
  and checkpoint hook HF runs right after `on_step_end` (`_maybe_log_save_evaluate`, added to the step it follows).
`total` runs from `on_step_begin` to the end of that hook, and `total == sum(PHASES)` by construction.
`completion_tokens` counts the tokens sampled that step (EOS included), for generated tokens per second.
`cpu_s`: CPU seconds (user + system, all threads of the process) over the same span as `total`: on a machine
shared with other jobs, wall time swings with their load while the CPU work of a step stays put.
On CUDA every boundary first waits for the device (`torch.cuda.synchronize`), so kernels queued in one phase are
not billed to the next; that adds a few synchronisations per step that training itself does not have.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from transformers import TrainerCallback

PHASES = ("generation", "scoring", "rewards", "loss_backward", "optimizer", "other")


def _clock() -> float:
    """`time.perf_counter()` once the CUDA device (if one is in use) has finished the work queued so far."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._cur: dict[str, float] = {}
        self._in_scoring = False
        self._step_start = 0.0
        self._step_cpu_start = 0.0
        self._last_train_end = 0.0
        self._log_pending = False  # the step just ended still gets the logging/save hook's time

    @classmethod
    def attach(cls, trainer: Any) -> StepTimer:
        """Instrument `trainer`; an HF Trainer that is not GRPO's (D2L, contrastive) has no generation, scoring or
        rewards: its steps split into loss_backward, optimizer and other."""
        timer = cls()
        if hasattr(trainer, "_generate"):
            timer._wrap(trainer, "_generate", "generation", count_tokens=True)
            timer._wrap(trainer, "_calculate_rewards", "rewards")
            timer._wrap_scoring(trainer)
        timer._wrap(trainer, "_prepare_inputs", "prepare")
        timer._wrap(trainer, "training_step", "train_step", mark_end=True)
        timer._wrap_log(trainer)
        trainer.add_callback(timer)
        return timer

    def _add(self, key: str, value: float) -> None:
        self._cur[key] = self._cur.get(key, 0.0) + value

    def _wrap(self, trainer: Any, name: str, key: str, count_tokens: bool = False, mark_end: bool = False) -> None:
        fn = getattr(trainer, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = _clock()
            out = fn(*args, **kwargs)
            t1 = _clock()
            self._add(key, t1 - t0)
            if count_tokens:  # `_generate` returns (prompt_ids, completion_ids, ...) lists of token lists
                self._add("completion_tokens", float(sum(len(c) for c in out[1])))
            if mark_end:
                self._last_train_end = t1
            return out

        setattr(trainer, name, timed)

    def _wrap_scoring(self, trainer: Any) -> None:
        outer, inner = trainer._generate_and_score_completions, trainer._get_per_token_logps_and_entropies

        @functools.wraps(outer)
        def generate_and_score(*args, **kwargs):
            self._in_scoring = True
            try:
                return outer(*args, **kwargs)
            finally:
                self._in_scoring = False

        @functools.wraps(inner)
        def logps(*args, **kwargs):
            if not self._in_scoring:  # the policy pass inside the loss: part of loss_backward
                return inner(*args, **kwargs)
            t0 = _clock()
            out = inner(*args, **kwargs)
            self._add("scoring", _clock() - t0)
            return out

        trainer._generate_and_score_completions = generate_and_score
        trainer._get_per_token_logps_and_entropies = logps

    def _wrap_log(self, trainer: Any) -> None:
        fn = trainer._maybe_log_save_evaluate

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = _clock()
            out = fn(*args, **kwargs)
            if self._log_pending and self.steps:  # once per step: HF calls it again at the end of an epoch
                dt = _clock() - t0
                self.steps[-1]["total"] += dt
                self.steps[-1]["other"] += dt
                self.steps[-1]["cpu_s"] = time.process_time() - self._step_cpu_start
                self._log_pending = False
            return out

        trainer._maybe_log_save_evaluate = timed

    # -- callback ------------------------------------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._cur = {}
        self._step_start = _clock()
        self._step_cpu_start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        end = _clock()
        c = self._cur
        rec = {
            "total": end - self._step_start,
            "generation": c.get("generation", 0.0),
            "scoring": c.get("scoring", 0.0),
            "rewards": c.get("rewards", 0.0),
            "loss_backward": c.get("train_step", 0.0) - c.get("prepare", 0.0),
            "optimizer": end - self._last_train_end,
            "completion_tokens": c.get("completion_tokens", 0.0),
            "cpu_s": time.process_time() - self._step_cpu_start,
        }
        # `_prepare_inputs` holds generation, scoring and rewards; what else it does is bookkeeping
        rec["other"] = rec["total"] - sum(rec[p] for p in PHASES if p != "other")
        self.steps.append(rec)
        self._log_pending = True
