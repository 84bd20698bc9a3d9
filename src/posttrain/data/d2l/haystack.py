"""Long documents for D2L: a document's sentences scattered at random depths among filler sentences, up to a target
length in tokens (a needle-in-a-haystack set when the target is a multiple of the model's context window).

The filler is bland, self-contained prose with no names, numbers or dates, so it never answers (or competes with)
a question about the document's facts; as in the usual needle-in-a-haystack sets, only the needles carry
information.
"""

from __future__ import annotations

import random
from typing import Any

FILLER: tuple[str, ...] = (
    "The grass in the meadow was green after the rain.",
    "A light wind moved through the trees near the river.",
    "Clouds drifted slowly across the pale afternoon sky.",
    "The path to the old bridge was covered in fallen leaves.",
    "Somewhere in the distance a dog barked twice and fell silent.",
    "The kettle on the stove began to whistle softly.",
    "Rows of tomatoes ripened in the warm summer light.",
    "The library was quiet except for the turning of pages.",
    "A cat slept on the windowsill in a patch of sunlight.",
    "Waves rolled onto the shore and drew back again.",
    "The market smelled of fresh bread and oranges.",
    "Snow had settled on the rooftops during the night.",
    "The train moved steadily through the flat farmland.",
    "Children played a game of tag in the small park.",
    "The lamp in the hallway flickered and then steadied.",
    "Bees moved from flower to flower along the fence.",
    "The soup simmered while the bread cooled on the table.",
    "A narrow staircase led up to the attic room.",
    "The fog lifted slowly from the valley in the morning.",
    "Old photographs were stacked in a box under the bed.",
    "The river was wide and calm below the hills.",
    "Someone had left an umbrella leaning against the door.",
    "The garden gate creaked whenever the wind picked up.",
    "Shadows grew longer as the sun sank behind the houses.",
    "The bakery opened early and closed in the afternoon.",
    "A flock of birds circled above the empty field.",
    "The floorboards of the old house were smooth and worn.",
    "Rain tapped against the glass for most of the evening.",
    "The orchard was full of apples that nobody had picked.",
    "A small boat rocked gently at the end of the pier.",
    "The smell of pine filled the cold mountain air.",
    "Candles burned low on the long wooden table.",
    "The street was empty except for a passing bicycle.",
    "Ivy climbed the walls of the quiet courtyard.",
    "The clock in the kitchen ticked on through the night.",
    "Frost covered the windows of the parked cars.",
    "A wooden bench stood under the shade of an oak tree.",
    "The stream ran clear over the smooth grey stones.",
    "Steam rose from the cups of tea on the counter.",
    "The hills turned gold in the last light of the day.",
)


def token_count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def scatter(sentences: list[str], target_tokens: int, tokenizer: Any, rng: random.Random) -> tuple[str, list[int]]:
    """(text, each of `sentences`' character offset in it): `sentences` in their order at uniformly random depths
    among filler sentences drawn by `rng`, as many as fit in `target_tokens` (the text is at most `target_tokens`
    long and within one filler sentence of it; no filler when the sentences alone reach it)."""
    cost: dict[str, int] = {}

    def tokens(s: str) -> int:  # a sentence's tokens after the joining space
        if s not in cost:
            cost[s] = token_count(tokenizer, " " + s)
        return cost[s]

    total = sum(tokens(s) for s in sentences)
    filler: list[str] = []
    while True:
        nxt = rng.choice(FILLER)
        if total + tokens(nxt) > target_tokens:
            break
        filler.append(nxt)
        total += tokens(nxt)
    slots = set(rng.sample(range(len(filler) + len(sentences)), len(sentences)))
    facts, fill = iter(sentences), iter(filler)
    sequence = [(i in slots, next(facts) if i in slots else next(fill)) for i in range(len(filler) + len(sentences))]
    while True:  # the joined text can tokenize a little longer than its sentences: drop filler from the end
        text = " ".join(t for _, t in sequence)
        if token_count(tokenizer, text) <= target_tokens or all(is_fact for is_fact, _ in sequence):
            break
        last = max(i for i, (is_fact, _) in enumerate(sequence) if not is_fact)
        del sequence[last]
    offsets, pos = [], 0
    for is_fact, t in sequence:
        if is_fact:
            offsets.append(pos)
        pos += len(t) + 1  # the joining space
    return text, offsets
