"""Adaptive KL coefficient: move beta so the measured per-token KL tracks `algo.kl.target`.

Two rules, both multiplicative and clipped so one noisy step cannot swing beta by more than ±20%:
- proportional (horizon null):  beta <- beta * exp(clip((KL - target) / target, -0.2, 0.2))
- horizon (Ziegler et al. 2019): beta <- beta * (1 + clip((KL - target) / target, -0.2, 0.2) * n_steps / horizon)
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class AdaptiveBeta:
    beta: float
    target: float
    horizon: int | None = None
    beta_min: float = 1e-6
    beta_max: float = 10.0

    def update(self, kl: float, n_steps: int = 1) -> float:
        """New beta after observing mean per-token `kl` over the last `n_steps` optimizer steps."""
        if not math.isfinite(kl):
            return self.beta
        error = max(-0.2, min(0.2, (kl - self.target) / self.target))
        if self.horizon is None:
            self.beta *= math.exp(error)
        else:
            self.beta *= 1.0 + error * n_steps / self.horizon
        self.beta = min(self.beta_max, max(self.beta_min, self.beta))
        return self.beta
