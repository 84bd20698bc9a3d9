"""The plan against a real run: GRPO on a random Llama-shaped model (19M params) on CPU, peak RSS within ±15%.

Same code as experiments/memory_plan/validate.py (which also runs the larger sizes for the README table).
"""

from __future__ import annotations

import pytest

from experiments.memory_plan import validate


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_plan_within_15_percent_of_measured_peak_rss(lora):
    row = validate.case("S", lora)
    assert row["params_total"] > 10e6  # tens of millions of parameters
    assert abs(row["error"]) <= 0.15, row
