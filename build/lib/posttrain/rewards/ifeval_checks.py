"""The 25 IFEval instruction checkers, one function each.

Same instruction ids and kwargs names as Google's public IFEval
(``instruction_following_eval/instructions_registry.py``), and the same verdicts: each
checker reproduces the reference ``check_following`` rule (regexes, tokenisation,
langdetect fallbacks included), so a reward trained on here is the metric reported
there. ``tests/rewards/test_ifeval_agreement.py`` holds this to the reference's verdicts.

Differences, all on inputs the reference cannot score deterministically:

* A missing required kwarg raises ``ValueError`` (the reference draws a random value).
* A regex kwarg (keyword, section splitter) that is not a valid pattern is matched
  literally (the reference raises ``re.error``).
* Relations: besides IFEval's ``"less than"`` and ``"at least"``, ``"at most"``,
  ``"exactly"`` and ``"around"`` (|n - N| <= max(round(0.1 N), 1)) are accepted, so
  RLVR-IFeval's quantifiers map onto the same ids.
* ``detectable_format:constrained_response`` takes an optional ``options`` list
  (default IFEval's three "My answer is ..." options).
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable
from typing import Any

from posttrain.rewards.text import count_sentences, count_words, detect_language, word_tokenize

RELATIONS = ("less than", "at least", "at most", "exactly", "around")
CONSTRAINED_RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def compare(actual: int, relation: str, n: int) -> bool:
    """``actual <relation> n`` for the IFEval relations (plus the RLVR extensions)."""
    if relation == "less than":
        return actual < n
    if relation == "at least":
        return actual >= n
    if relation == "at most":
        return actual <= n
    if relation == "exactly":
        return actual == n
    if relation == "around":
        return abs(actual - n) <= max(round(0.1 * n), 1)
    raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")


def _pattern(p: str) -> str:
    try:
        re.compile(p)
        return p
    except re.error:
        return re.escape(p)


# --- keywords ---------------------------------------------------------------------------
def keywords_existence(r: str, *, keywords: list[str]) -> bool:
    return all(re.search(_pattern(k), r, flags=re.IGNORECASE) for k in sorted(keywords))


def keywords_frequency(r: str, *, keyword: str, frequency: int, relation: str) -> bool:
    n = len(re.findall(_pattern(keyword.strip()), r, flags=re.IGNORECASE))
    return compare(n, relation, int(frequency))


def keywords_forbidden_words(r: str, *, forbidden_words: list[str]) -> bool:
    return not any(re.search(r"\b" + _pattern(w) + r"\b", r, flags=re.IGNORECASE) for w in forbidden_words)


def keywords_letter_frequency(r: str, *, letter: str, let_frequency: int, let_relation: str) -> bool:
    letter = letter.strip().lower()
    if len(letter) != 1:
        raise ValueError(f"letter must be a single character, got {letter!r}")
    return compare(collections.Counter(r.lower())[letter], let_relation, int(let_frequency))


# --- language / case ----------------------------------------------------------------------
def language_response_language(r: str, *, language: str) -> bool:
    detected = detect_language(r)
    return True if detected is None else detected == language  # reference: undetectable counts as followed


def _english(r: str) -> bool:
    detected = detect_language(r)
    return detected is None or detected == "en"  # reference: undetectable counts as followed


def change_case_english_capital(r: str) -> bool:
    return r.isupper() and _english(r)


def change_case_english_lowercase(r: str) -> bool:
    return r.islower() and _english(r)


def change_case_capital_word_frequency(r: str, *, capital_frequency: int, capital_relation: str) -> bool:
    n = sum(1 for w in word_tokenize(r) if w.isupper())
    return compare(n, capital_relation, int(capital_frequency))


# --- length -----------------------------------------------------------------------------
def length_number_sentences(r: str, *, num_sentences: int, relation: str) -> bool:
    return compare(count_sentences(r), relation, int(num_sentences))


def length_number_words(r: str, *, num_words: int, relation: str) -> bool:
    return compare(count_words(r), relation, int(num_words))


def length_number_paragraphs(r: str, *, num_paragraphs: int) -> bool:
    paragraphs = re.split(r"\s?\*\*\*\s?", r)
    n = len(paragraphs)
    for i, p in enumerate(paragraphs):
        if not p.strip():
            if i in (0, len(paragraphs) - 1):
                n -= 1
            else:
                return False
    return n == int(num_paragraphs)


def length_nth_paragraph_first_word(r: str, *, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    num_paragraphs, nth = int(num_paragraphs), int(nth_paragraph)
    if not 0 < nth <= num_paragraphs:
        raise ValueError(f"nth_paragraph must be in 1..num_paragraphs={num_paragraphs}, got {nth}")
    paragraphs = re.split(r"\n\n", r)
    n = sum(1 for p in paragraphs if p.strip())
    if nth > n:
        return False
    paragraph = paragraphs[nth - 1].strip()  # indexes the raw split, like the reference
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for ch in word:
        if ch in {".", ",", "?", "!", "'", '"'}:
            break
        first += ch.lower()
    return n == num_paragraphs and first == first_word.lower()


# --- detectable content / format --------------------------------------------------------
def content_number_placeholders(r: str, *, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", r)) >= int(num_placeholders)


def content_postscript(r: str, *, postscript_marker: str) -> bool:
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + _pattern(marker.lower()) + r".*$"
    return bool(re.findall(pattern, r.lower(), flags=re.MULTILINE))


def format_number_bullet_lists(r: str, *, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", r, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", r, flags=re.MULTILINE)
    return len(stars) + len(dashes) == int(num_bullets)


def format_constrained_response(r: str, *, options: list[str] | None = None) -> bool:
    r = r.strip()
    return any(o in r for o in (options or CONSTRAINED_RESPONSE_OPTIONS))


def format_number_highlighted_sections(r: str, *, num_highlights: int) -> bool:
    n = sum(1 for h in re.findall(r"\*[^\n\*]*\*", r) if h.strip("*").strip())
    n += sum(1 for h in re.findall(r"\*\*[^\n\*]*\*\*", r) if h.removeprefix("**").removesuffix("**").strip())
    return n >= int(num_highlights)


def format_multiple_sections(r: str, *, section_spliter: str, num_sections: int) -> bool:
    sections = re.split(r"\s?" + _pattern(section_spliter.strip()) + r"\s?\d+\s?", r)
    return len(sections) - 1 >= int(num_sections)


def format_json_format(r: str) -> bool:
    value = r.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(prefix)
    value = value.removesuffix("```").strip()
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def format_title(r: str) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", r))


# --- combination / start-end / punctuation ------------------------------------------------
def combination_two_responses(r: str) -> bool:
    valid = []
    parts = r.split("******")
    for i, p in enumerate(parts):
        if not p.strip():
            if i not in (0, len(parts) - 1):
                return False
        else:
            valid.append(p)
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


def combination_repeat_prompt(r: str, *, prompt_to_repeat: str) -> bool:
    return r.strip().lower().startswith(prompt_to_repeat.strip().lower())


def startend_end_checker(r: str, *, end_phrase: str) -> bool:
    return r.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def startend_quotation(r: str) -> bool:
    r = r.strip()
    return len(r) > 1 and r[0] == '"' and r[-1] == '"'


def punctuation_no_comma(r: str) -> bool:
    return "," not in r


Checker = Callable[..., bool]

#: instruction id -> (checker, required kwargs, optional kwargs)
INSTRUCTIONS: dict[str, tuple[Checker, tuple[str, ...], tuple[str, ...]]] = {
    "keywords:existence": (keywords_existence, ("keywords",), ()),
    "keywords:frequency": (keywords_frequency, ("keyword", "frequency", "relation"), ()),
    "keywords:forbidden_words": (keywords_forbidden_words, ("forbidden_words",), ()),
    "keywords:letter_frequency": (keywords_letter_frequency, ("letter", "let_frequency", "let_relation"), ()),
    "language:response_language": (language_response_language, ("language",), ()),
    "length_constraints:number_sentences": (length_number_sentences, ("num_sentences", "relation"), ()),
    "length_constraints:number_paragraphs": (length_number_paragraphs, ("num_paragraphs",), ()),
    "length_constraints:number_words": (length_number_words, ("num_words", "relation"), ()),
    "length_constraints:nth_paragraph_first_word": (
        length_nth_paragraph_first_word,
        ("num_paragraphs", "nth_paragraph", "first_word"),
        (),
    ),
    "detectable_content:number_placeholders": (content_number_placeholders, ("num_placeholders",), ()),
    "detectable_content:postscript": (content_postscript, ("postscript_marker",), ()),
    "detectable_format:number_bullet_lists": (format_number_bullet_lists, ("num_bullets",), ()),
    "detectable_format:constrained_response": (format_constrained_response, (), ("options",)),
    "detectable_format:number_highlighted_sections": (format_number_highlighted_sections, ("num_highlights",), ()),
    "detectable_format:multiple_sections": (format_multiple_sections, ("section_spliter", "num_sections"), ()),
    "detectable_format:json_format": (format_json_format, (), ()),
    "detectable_format:title": (format_title, (), ()),
    "combination:two_responses": (combination_two_responses, (), ()),
    "combination:repeat_prompt": (combination_repeat_prompt, ("prompt_to_repeat",), ()),
    "startend:end_checker": (startend_end_checker, ("end_phrase",), ()),
    "change_case:capital_word_frequency": (
        change_case_capital_word_frequency,
        ("capital_frequency", "capital_relation"),
        (),
    ),
    "change_case:english_capital": (change_case_english_capital, (), ()),
    "change_case:english_lowercase": (change_case_english_lowercase, (), ()),
    "punctuation:no_comma": (punctuation_no_comma, (), ()),
    "startend:quotation": (startend_quotation, (), ()),
}


def check(instruction_id: str, kwargs: dict[str, Any] | None, response: str) -> bool:
    """Raw ``check_following`` verdict (no empty-response rule; see ``ifeval.follows``)."""
    try:
        fn, required, optional = INSTRUCTIONS[instruction_id]
    except KeyError:
        raise KeyError(f"unknown IFEval instruction id {instruction_id!r}; known: {sorted(INSTRUCTIONS)}") from None
    given = {k: v for k, v in (kwargs or {}).items() if v is not None}
    unknown = set(given) - set(required) - set(optional)
    if unknown:
        raise TypeError(f"{instruction_id}: unexpected kwargs {sorted(unknown)} (takes {list(required + optional)})")
    missing = [k for k in required if k not in given]
    if missing:
        raise ValueError(f"{instruction_id}: missing kwargs {missing}")
    return bool(fn(response, **given))
