"""Offline toy prompts for the length-to-cap probe (the default `python train.py` task)."""

from __future__ import annotations

import random

from datasets import Dataset

_TOPICS = ["the sea", "a red fox", "winter", "the moon", "a small town", "bread", "rivers", "old maps", "bees"]
_ASKS = ["Write about {t}.", "Tell me a story about {t}.", "Describe {t}.", "Say something about {t}."]


def length_prompts(n: int, seed: int = 0) -> Dataset:
    """`n` conversational prompts; the reward (completion length up to a cap) needs no answer column."""
    rng = random.Random(seed)
    rows = [
        {"prompt": [{"role": "user", "content": rng.choice(_ASKS).format(t=rng.choice(_TOPICS))}]} for _ in range(n)
    ]
    return Dataset.from_list(rows)
