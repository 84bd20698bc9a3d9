"""Memory plan vs measured peak RSS: `python experiments/memory_plan/validate.py` (see README.md)."""
