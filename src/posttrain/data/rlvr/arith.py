"""Offline arithmetic word problems with exact integer answers (a GSM8K-shaped toy task).

Each problem chains 1..``max_steps`` operations (add, remove, multiply by packs, share
equally, spend money) over small integers, with every intermediate value a non-negative
integer, so the ``answer`` column is exact and ``posttrain.rewards.math`` scores it.
Deterministic in ``seed``.
"""

from __future__ import annotations

import random

from datasets import Dataset

from posttrain.data.rlvr.schema import as_prompt, math_features

__all__ = ["DEFAULT_SUFFIX", "generate_arithmetic", "make_problem"]

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam"]
ITEMS = ["apple", "marble", "sticker", "pencil", "cookie", "stamp", "shell", "book", "card", "button"]
DEFAULT_SUFFIX = " Put the final answer in \\boxed{}."


def _step(rng: random.Random, name: str, value: int, item: str, max_value: int) -> tuple[str, int]:
    """One more sentence acting on the running total; returns (text, new total)."""
    ops = ["add", "packs"] + (["remove"] if value > 1 else []) + (["share"] if value > 1 else [])
    op = rng.choice(ops)
    if op == "add":
        b = rng.randint(1, max_value)
        return f"Then {name} gets {b} more {item}s.", value + b
    if op == "remove":
        b = rng.randint(1, value - 1)
        return f"Then {name} gives away {b} {item}s.", value - b
    if op == "packs":
        packs, each = rng.randint(2, 6), rng.randint(2, max(2, max_value // 4))
        return f"Then {name} buys {packs} packs with {each} {item}s in each pack.", value + packs * each
    divisors = [d for d in range(2, 7) if value % d == 0]
    if not divisors:
        b = rng.randint(1, max_value)
        return f"Then {name} finds {b} more {item}s.", value + b
    d = rng.choice(divisors)
    return f"Then {name} splits the {item}s equally into {d} boxes and keeps one box.", value // d


def make_problem(rng: random.Random, max_steps: int = 3, max_value: int = 50) -> tuple[str, int]:
    """One word problem and its exact answer."""
    if max_steps < 1 or max_value < 2:
        raise ValueError(f"need max_steps >= 1 and max_value >= 2, got {max_steps}, {max_value}")
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if rng.random() < 0.25:  # money variant
        price, count = rng.randint(1, 9), rng.randint(1, 9)
        money = price * count + rng.randint(0, max_value)
        return (
            f"{name} has ${money}. Each {item} costs ${price}. {name} buys {count} {item}s. "
            f"How many dollars does {name} have left?"
        ), money - price * count
    value = rng.randint(1, max_value)
    sentences = [f"{name} has {value} {item}s."]
    for _ in range(rng.randint(1, max_steps)):
        text, value = _step(rng, name, value, item, max_value)
        sentences.append(text)
    sentences.append(f"How many {item}s does {name} have now?")
    return " ".join(sentences), value


def generate_arithmetic(
    n: int, seed: int = 0, max_steps: int = 3, max_value: int = 50, chat: bool = True, suffix: str = DEFAULT_SUFFIX
) -> Dataset:
    """``n`` problems. Columns: ``prompt`` (user conversation when ``chat``, else str), ``answer`` (str)."""
    rng = random.Random(seed)
    prompts, answers = [], []
    for _ in range(n):
        q, a = make_problem(rng, max_steps, max_value)
        prompts.append(as_prompt(q + suffix, chat))
        answers.append(str(a))
    return Dataset.from_dict({"prompt": prompts, "answer": answers}, features=math_features(chat))
