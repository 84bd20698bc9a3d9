"""Addition/subtraction problems with controlled operand ranges and a held-out split disjoint from training.

"What is 47 + 38? Answer with just the number." Every problem ``(a, op, b)`` with ``min_value <= a, b <=
max_value`` (and ``a >= b`` for subtraction when ``nonnegative``) is enumerated and shuffled with a fixed
``split_seed``; the first ``heldout_size`` form the held-out pool (``split="test"`` returns its first ``n``, the
same problems whatever ``seed``), and training samples (``seed``) come only from the rest. ``train_op_share``
(one share per op of ``ops``, e.g. ``[0.5, 0.5]``) sets each operation's share of the training samples (by default
each problem is equally likely: two-digit subtraction with ``a >= b`` is a third); the held-out pool keeps its mix. The
``answer`` column is exact, for ``posttrain.rewards.math``.
"""

from __future__ import annotations

import random

from datasets import Dataset

from posttrain.data.rlvr.schema import as_prompt, math_features

__all__ = ["DEFAULT_TEMPLATE", "generate_addition", "problem_space"]

DEFAULT_TEMPLATE = "What is {a} {op} {b}? Answer with just the number."
MAX_SPACE = 2_000_000
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}


def problem_space(
    min_value: int, max_value: int, ops: tuple[str, ...], nonnegative: bool
) -> list[tuple[int, str, int]]:
    """Every ``(a, op, b)`` in the ranges, in a canonical order."""
    if min_value > max_value:
        raise ValueError(f"min_value={min_value} > max_value={max_value}")
    bad = [op for op in ops if op not in _OPS]
    if bad or not ops:
        raise ValueError(f"ops {list(ops)}: each must be one of {sorted(_OPS)}")
    span = max_value - min_value + 1
    if span * span * len(ops) > MAX_SPACE:
        raise ValueError(f"operand range [{min_value}, {max_value}] has more than {MAX_SPACE} problems")
    values = range(min_value, max_value + 1)
    return [(a, op, b) for op in ops for a in values for b in values if not (op == "-" and nonnegative and a < b)]


def generate_addition(
    n: int,
    seed: int = 0,
    split: str = "train",
    min_value: int = 10,
    max_value: int = 99,
    ops: tuple[str, ...] | list[str] = ("+", "-"),
    nonnegative: bool = True,
    heldout_size: int = 500,
    split_seed: int = 1234,
    template: str = DEFAULT_TEMPLATE,
    chat: bool = True,
    train_op_share: list[float] | tuple[float, ...] | None = None,
) -> Dataset:
    """``n`` problems of ``split`` (train: sampled with ``seed`` outside the held-out pool; test: the pool's first
    ``n``). Columns: ``prompt`` (user conversation when ``chat``), ``answer`` (str)."""
    space = problem_space(min_value, max_value, tuple(ops), nonnegative)
    if heldout_size >= len(space):
        raise ValueError(f"heldout_size={heldout_size} leaves no training problems ({len(space)} in the ranges)")
    random.Random(split_seed).shuffle(space)
    heldout, train = space[:heldout_size], space[heldout_size:]
    if split == "test":
        if n > heldout_size:
            raise ValueError(f"{n} held-out problems asked, heldout_size={heldout_size}")
        rows = heldout[:n]
    elif split == "train":
        rng = random.Random(seed)
        if train_op_share:
            rows = _sample_by_op(train, n, tuple(ops), list(train_op_share), rng)
        else:
            rows = _draw(train, n, rng)
    else:
        raise ValueError(f"split={split!r} is not train or test")
    prompts = [as_prompt(template.format(a=a, op=op, b=b), chat) for a, op, b in rows]
    answers = [str(_OPS[op](a, b)) for a, op, b in rows]
    return Dataset.from_dict({"prompt": prompts, "answer": answers}, features=math_features(chat))


def _draw(pool: list[tuple[int, str, int]], n: int, rng: random.Random) -> list[tuple[int, str, int]]:
    """`n` of `pool`: without replacement while the pool lasts, else with."""
    return rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]


def _sample_by_op(
    problems: list[tuple[int, str, int]], n: int, ops: tuple[str, ...], share: list[float], rng: random.Random
) -> list[tuple[int, str, int]]:
    """`n` problems in which op `ops[i]` makes up `share[i]`, without replacement within an op while it lasts
    (then with); the order is shuffled."""
    if len(share) != len(ops) or any(v < 0 for v in share) or abs(sum(share) - 1) > 1e-6:
        raise ValueError(f"train_op_share {list(share)}: one share >= 0 per op of {list(ops)}, summing to 1")
    counts = [round(n * v) for v in share]
    counts[max(range(len(ops)), key=lambda i: share[i])] += n - sum(counts)
    rows: list[tuple[int, str, int]] = []
    for op, count in zip(ops, counts, strict=True):
        rows += _draw([p for p in problems if p[1] == op], count, rng)
    rng.shuffle(rows)
    return rows
