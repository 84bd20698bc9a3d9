"""Benchmarks as scripts: `python -m posttrain.bench <name> [options]`, one JSON line per measurement.

Names: `grpo_loss` (policy-loss backends vs eager and two plain GEMMs, see `posttrain.bench.grpo_loss`).
Absolute times are noisy on shared machines; compare the ratios measured side by side in one run.
"""

BENCHES = ("grpo_loss", "grpo_step")
