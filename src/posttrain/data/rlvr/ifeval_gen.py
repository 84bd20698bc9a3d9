"""Offline IFEval-style prompt generator: a writing task plus 1-3 verifiable constraints.

Rows have the ``google/IFEval`` / RLVR-IFeval reward columns: ``instruction_id_list`` (ids
from the 25 IFEval instructions) and ``kwargs`` (one dict per instruction, IFEval's kwargs
names), so ``posttrain.rewards.ifeval_strict/ifeval_loose`` score completions directly.
Constraint descriptions use IFEval's own wording; constraints that contradict each other
(IFEval's conflict table, e.g. json_format with most others, all-capitals with
all-lowercase) are never combined. Deterministic in ``seed``.
"""

from __future__ import annotations

import random
from typing import Any

from datasets import Dataset

from posttrain.data.rlvr.schema import as_prompt, ifeval_features, normalize_kwargs

__all__ = ["IFEVAL_GEN_IDS", "describe", "generate_ifeval"]

TASKS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Write a product description for a reusable water bottle.",
    "Explain how rainbows form to a ten-year-old.",
    "Write a cover letter for a junior data analyst position.",
    "Describe your ideal weekend in the mountains.",
    "Write a blog post about the benefits of learning a second language.",
    "Summarize the plot of a heist movie you invent.",
    "Write a letter to a friend recommending a book.",
    "Give advice to a student preparing for their first exam.",
    "Write a poem about the ocean at night.",
    "Explain why the sky is blue.",
    "Write a review of a fictional Italian restaurant.",
    "Describe the history of the bicycle.",
    "Write an email asking your manager for a day off.",
    "Explain the rules of chess to a beginner.",
    "Write a speech for a school science fair opening.",
    "Pitch a startup idea that helps people save energy at home.",
    "Write a travel guide entry for a small coastal town.",
    "Explain what photosynthesis is.",
    "Write a dialogue between a cat and a dog about breakfast.",
]
WORDS = [
    "river",
    "garden",
    "window",
    "coffee",
    "planet",
    "music",
    "winter",
    "bridge",
    "market",
    "candle",
    "forest",
    "engine",
    "letter",
    "mirror",
    "harbor",
    "lantern",
    "meadow",
    "puzzle",
    "ticket",
    "valley",
]
LANGUAGES = {"en": "English", "es": "Spanish", "fr": "French", "de": "German", "it": "Italian", "pt": "Portuguese"}
END_PHRASES = [
    "Any other questions?",
    "Is there anything else I can help with?",
    "Let me know if you have additional questions.",
]
RELATIONS = ("less than", "at least")


def _rel(rng: random.Random) -> str:
    return rng.choice(RELATIONS)


# id -> (kwargs sampler, description template)
SPECS: dict[str, tuple[Any, str]] = {
    "keywords:existence": (
        lambda r: {"keywords": sorted(r.sample(WORDS, 2))},
        "Include keywords {keywords} in the response.",
    ),
    "keywords:frequency": (
        lambda r: {"keyword": r.choice(WORDS), "frequency": r.randint(1, 3), "relation": _rel(r)},
        "In your response, the word {keyword} should appear {relation} {frequency} times.",
    ),
    "keywords:forbidden_words": (
        lambda r: {"forbidden_words": sorted(r.sample(WORDS, 2))},
        "Do not include keywords {forbidden_words} in the response.",
    ),
    "keywords:letter_frequency": (
        lambda r: {
            "letter": r.choice("abcdefghilmnoprstuw"),
            "let_frequency": r.randint(1, 10),
            "let_relation": _rel(r),
        },
        "In your response, the letter {letter} should appear {let_relation} {let_frequency} times.",
    ),
    "language:response_language": (
        lambda r: {"language": r.choice(sorted(LANGUAGES))},
        "Your ENTIRE response should be in {language_name} language, no other language is allowed.",
    ),
    "length_constraints:number_sentences": (
        lambda r: {"num_sentences": r.randint(2, 12), "relation": _rel(r)},
        "Your response should contain {relation} {num_sentences} sentences.",
    ),
    "length_constraints:number_paragraphs": (
        lambda r: {"num_paragraphs": r.randint(2, 5)},
        "There should be {num_paragraphs} paragraphs. Paragraphs are separated with the markdown divider: ***",
    ),
    "length_constraints:number_words": (
        lambda r: {"num_words": r.randint(50, 300), "relation": _rel(r)},
        "Answer with {relation} {num_words} words.",
    ),
    "length_constraints:nth_paragraph_first_word": (
        lambda r: (lambda n: {"num_paragraphs": n, "nth_paragraph": r.randint(1, n), "first_word": r.choice(WORDS)})(
            r.randint(2, 5)
        ),
        "There should be {num_paragraphs} paragraphs. Paragraphs and only paragraphs are separated with each other by two "  # noqa: E501 - IFEval's wording
        "new lines as if it was '\\n\\n' in python. Paragraph {nth_paragraph} must start with word {first_word}.",
    ),
    "detectable_content:number_placeholders": (
        lambda r: {"num_placeholders": r.randint(1, 4)},
        "The response must contain at least {num_placeholders} placeholders represented by square brackets, such as [address].",  # noqa: E501 - IFEval's wording
    ),
    "detectable_content:postscript": (
        lambda r: {"postscript_marker": r.choice(["P.S.", "P.P.S"])},
        "At the end of your response, please explicitly add a postscript starting with {postscript_marker}",
    ),
    "detectable_format:number_bullet_lists": (
        lambda r: {"num_bullets": r.randint(2, 5)},
        "Your answer must contain exactly {num_bullets} bullet points. Use the markdown bullet points such as:\n"
        "* This is point 1. \n* This is point 2",
    ),
    "detectable_format:constrained_response": (
        lambda r: {},
        "Answer with one of the following options: ('My answer is yes.', 'My answer is no.', 'My answer is maybe.')",
    ),
    "detectable_format:number_highlighted_sections": (
        lambda r: {"num_highlights": r.randint(1, 4)},
        "Highlight at least {num_highlights} sections in your answer with markdown, i.e. *highlighted section*.",
    ),
    "detectable_format:multiple_sections": (
        lambda r: {"section_spliter": r.choice(["Section", "SECTION"]), "num_sections": r.randint(2, 5)},
        "Your response must have {num_sections} sections. Mark the beginning of each section with {section_spliter} X, "
        "such as:\n{section_spliter} 1\n[content of section 1]\n{section_spliter} 2\n[content of section 2]",
    ),
    "detectable_format:json_format": (
        lambda r: {},
        "Entire output should be wrapped in JSON format. You can use markdown ticks such as ```.",
    ),
    "detectable_format:title": (
        lambda r: {},
        "Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
    ),
    "combination:two_responses": (
        lambda r: {},
        "Give two different responses. Responses and only responses should be separated by 6 asterisk symbols: ******.",
    ),
    "combination:repeat_prompt": (
        lambda r: {},  # prompt_to_repeat is the task text, filled in by the generator
        "First repeat the request word for word without change, then give your answer (1. do not say any words or "
        "characters before repeating the request; 2. the request you need to repeat does not include this sentence)",
    ),
    "startend:end_checker": (
        lambda r: {"end_phrase": r.choice(END_PHRASES)},
        "Finish your response with this exact phrase {end_phrase}. No other words should follow this phrase.",
    ),
    "change_case:capital_word_frequency": (
        lambda r: {"capital_frequency": r.randint(1, 10), "capital_relation": _rel(r)},
        "In your response, words with all capital letters should appear {capital_relation} {capital_frequency} times.",
    ),
    "change_case:english_capital": (
        lambda r: {},
        "Your entire response should be in English, and in all capital letters.",
    ),
    "change_case:english_lowercase": (
        lambda r: {},
        "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed.",
    ),
    "punctuation:no_comma": (lambda r: {}, "In your entire response, refrain from the use of any commas."),
    "startend:quotation": (lambda r: {}, "Wrap your entire response with double quotation marks."),
}
IFEVAL_GEN_IDS: tuple[str, ...] = tuple(SPECS)

_ALL = set(SPECS)
# Pairs never combined (symmetric closure of IFEval's INSTRUCTION_CONFLICTS).
_CONFLICTS: dict[str, set[str]] = {
    "language:response_language": {
        "detectable_format:multiple_sections",
        "keywords:existence",
        "keywords:frequency",
        "keywords:forbidden_words",
        "startend:end_checker",
        "change_case:english_capital",
        "change_case:english_lowercase",
    },
    "length_constraints:number_paragraphs": {
        "length_constraints:nth_paragraph_first_word",
        "length_constraints:number_sentences",
    },
    "detectable_format:constrained_response": _ALL,
    "detectable_format:multiple_sections": {"detectable_format:number_highlighted_sections"},
    "detectable_format:json_format": _ALL - {"keywords:forbidden_words", "keywords:existence"},
    "combination:two_responses": _ALL
    - {
        "keywords:forbidden_words",
        "keywords:existence",
        "language:response_language",
        "detectable_format:title",
        "punctuation:no_comma",
    },
    "combination:repeat_prompt": _ALL - {"keywords:existence", "detectable_format:title", "punctuation:no_comma"},
    "change_case:capital_word_frequency": {"change_case:english_lowercase", "change_case:english_capital"},
    "change_case:english_lowercase": {"change_case:english_capital"},
    "startend:quotation": {"detectable_format:title"},
}


def conflicts(a: str, b: str) -> bool:
    return a == b or b in _CONFLICTS.get(a, set()) or a in _CONFLICTS.get(b, set())


def describe(instruction_id: str, kwargs: dict[str, Any]) -> str:
    """IFEval's description of one instruction with these kwargs."""
    kw = dict(kwargs)
    if "language" in kw:
        kw["language_name"] = LANGUAGES.get(kw["language"], kw["language"])
    return SPECS[instruction_id][1].format(**kw)


def generate_ifeval(
    n: int,
    seed: int = 0,
    min_constraints: int = 1,
    max_constraints: int = 3,
    chat: bool = True,
    instruction_ids: list[str] | None = None,
) -> Dataset:
    """``n`` prompts with 1-3 composed constraints (drawn from ``instruction_ids`` when given).

    Columns: ``prompt`` (a one-message user conversation when ``chat``, else a string),
    ``instruction_id_list``, ``kwargs`` (per instruction; ``None`` for kwargs an instruction
    does not take, as in google/IFEval), ``key``.
    """
    if not 1 <= min_constraints <= max_constraints:
        raise ValueError(f"need 1 <= min_constraints <= max_constraints, got {min_constraints}, {max_constraints}")
    pool = list(instruction_ids) if instruction_ids else IFEVAL_GEN_IDS
    unknown = sorted(set(pool) - set(IFEVAL_GEN_IDS))
    if unknown:
        raise ValueError(f"unknown instruction ids {unknown}")
    rng = random.Random(seed)
    rows: dict[str, list] = {"key": [], "prompt": [], "instruction_id_list": [], "kwargs": []}
    for key in range(n):
        task = rng.choice(TASKS)
        ids: list[str] = []
        target = rng.randint(min_constraints, max_constraints)
        for _ in range(50):
            if len(ids) == target:
                break
            cand = rng.choice(pool)
            if not any(conflicts(cand, i) for i in ids):
                ids.append(cand)
        kwargs = [SPECS[i][0](rng) for i in ids]
        for i, kw in zip(ids, kwargs):
            if i == "combination:repeat_prompt":
                kw["prompt_to_repeat"] = task
        text = task + " " + " ".join(describe(i, kw) for i, kw in zip(ids, kwargs))
        rows["key"].append(key)
        rows["prompt"].append(as_prompt(text, chat))
        rows["instruction_id_list"].append(ids)
        rows["kwargs"].append([normalize_kwargs(kw) for kw in kwargs])
    return Dataset.from_dict(rows, features=ifeval_features(chat))
