"""Benchmarks as scripts: `python -m posttrain.bench <name> [options]`, one JSON line per measurement.

Names: `grpo_loss` (policy-loss backends vs eager and two plain GEMMs), `grpo_step` (the whole GRPO step vs plain
TRL), `generation` (rollout engines: tokens per second and greedy equality); each module's docstring has its options.
Absolute times are noisy on shared machines; compare the ratios measured side by side in one run.
"""

BENCHES = ("grpo_loss", "grpo_step", "generation")
