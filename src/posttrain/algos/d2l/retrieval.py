"""BM25 retrieval into the granted window: the in-context baseline a retrieval-augmented reader would be (issue 62).

`retrieval_bm25` reads, instead of the document's first tokens (`in_context_truncated`), the document's sentences
that BM25 (the `bm25s` library, English stopwords, no stemming) ranks highest against the question, as many as fit
the same window (document + question + reply in `algo.context_window` tokens), in the document's order. A document
that fits the window whole is read whole.
"""

from __future__ import annotations

import logging
from typing import Any

import bm25s

from posttrain.data.d2l import SENTENCE_END, in_context_view, student_view

logging.getLogger("bm25s").setLevel(logging.INFO)  # its DEBUG line per index would be one per question in run.log


def ranked_sentences(document: str, question: str) -> list[tuple[int, str]]:
    """The document's sentences, (position, text), best BM25 match to `question` first; ties keep document order."""
    sentences = [s.strip() for s in SENTENCE_END.split(document) if s.strip()]
    if len(sentences) < 2:
        return list(enumerate(sentences))
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(sentences, stopwords="en", show_progress=False), show_progress=False)
    query = bm25s.tokenize([question], stopwords="en", return_ids=False, show_progress=False)[0]
    scores = retriever.get_scores(query)
    order = sorted(range(len(sentences)), key=lambda i: (-float(scores[i]), i))
    return [(i, sentences[i]) for i in order]


def retrieved_document(record: dict[str, Any], tokenizer: Any, max_length: int, window: int) -> str:
    """The best-ranked sentences of the record's document that fit with its question and reply in `window` tokens,
    joined in document order: what a reader granted `window` tokens sees after BM25 retrieval."""
    ranked = ranked_sentences(record["document"], record["question"])
    budget = window - len(student_view(record, tokenizer)["input_ids"]) - 4  # + the separator, as window_document
    for _ in range(4):  # joined text can tokenize a few tokens longer than its sentences: shrink and retry
        kept, used = [], 0
        for pos, text in ranked:
            n = len(tokenizer(" " + text, add_special_tokens=False)["input_ids"])
            if used + n <= budget:
                kept.append((pos, text))
                used += n
        text = " ".join(t for _, t in sorted(kept))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        excess = len(in_context_view(text, record, tokenizer, max_length, len(ids))["input_ids"]) - window
        if excess <= 0:
            return text
        budget -= excess
    return text
