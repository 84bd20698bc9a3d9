"""Bad-input reliability table: `python experiments/reliability/cases.py` (see README.md)."""
