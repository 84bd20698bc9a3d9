"""Adaptive KL coefficient: move beta so the measured per-token KL tracks `algo.kl.target`.

One update after every optimizer step, from that step's KL (the mean of its micro-batches' `kl`, over all
processes); the new beta is used from the next step on. Two rules, both multiplicative and clipped so one noisy
step cannot swing beta by more than ±20%:
- proportional (horizon null):  beta <- beta * exp(clip((KL - target) / target, -0.2, 0.2))
- horizon (Ziegler et al. 2019): beta <- beta * (1 + clip((KL - target) / target, -0.2, 0.2) / horizon)
  (the paper's n_steps / horizon with n_steps = 1: one optimizer step per update)

The controller is an HF `TrainerCallback` with `ExportableState`, so the Trainer writes its beta into every
checkpoint's `trainer_state.json` (`stateful_callbacks`); `PosttrainGRPOTrainer` reads it back on resume.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from transformers.trainer_callback import ExportableState, TrainerCallback


@dataclass
class AdaptiveBeta(TrainerCallback, ExportableState):
    beta: float
    target: float
    horizon: int | None = None
    beta_min: float = 1e-6
    beta_max: float = 10.0

    def update(self, kl: float) -> float:
        """New beta after one optimizer step whose mean per-token KL was `kl` (NaN: no measurement, no move)."""
        if not math.isfinite(kl):
            return self.beta
        error = max(-0.2, min(0.2, (kl - self.target) / self.target))
        if self.horizon is None:
            self.beta *= math.exp(error)
        else:
            self.beta *= 1.0 + error / self.horizon
        self.beta = min(self.beta_max, max(self.beta_min, self.beta))
        return self.beta

    def state(self) -> dict:
        """HF's checkpoint format: `AdaptiveBeta(**args)` is the controller as it was at the save."""
        return {"args": asdict(self), "attributes": {}}
