"""The plan against a real run: GRPO on a random Llama-shaped model (19M params) on CPU, peak RSS within -25/+15%.

Same code as experiments/memory_plan/validate.py (which also runs the larger sizes for the README table).
The plan counts tensors (test_plan_vs_measured checks those); the resident set also holds freed blocks glibc
keeps, more of them when threads contend for its arenas, so a busy machine measures more: -7..-14% idle, down
to -19% and -20.7% (S-lora, fresh clone, 2026-11-26) beside another pytest worker. The bound is wider on the
under-count side (the plan then over-states memory: the safe direction) for that reason only.
"""

from __future__ import annotations

import pytest

from experiments.memory_plan import validate


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_plan_within_bounds_of_measured_peak_rss(lora):
    row = validate.case("S", lora)
    assert row["params_total"] > 10e6  # tens of millions of parameters
    assert -0.25 <= row["error"] <= 0.15, row
