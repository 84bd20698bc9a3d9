"""D2L data: (document, question, answer) records — offline generated documents (`d2l_synth`: closed-set
attributes; `d2l_facts`: open answers, one- and two-fact questions, optionally long) or SQuAD / DROP / ROPES — and
their tokenization into the views D2L needs: the document alone (context encoder, in chunks), the question alone
(student, labels on the answer) and document + question (in-context teacher and baseline), where both document
views hold exactly the same, possibly cut, document; and the document cut to what a model granted a context
window of W tokens can read with the question (`window_document`: the truncated in-context baseline).

Importing the package loads no torch (config validation reads `facts`): the tokenizing functions import the chat
helpers on first use."""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

from omegaconf import DictConfig

from posttrain.data.d2l.facts import fact_documents, fact_qa
from posttrain.data.d2l.squad import load_squad
from posttrain.data.d2l.synthetic import ATTRIBUTES, synthetic_documents, synthetic_qa
from posttrain.errors import DataError

__all__ = [
    "ATTRIBUTES",
    "CHUNKINGS",
    "QA_FORMATS",
    "chunks_of",
    "d2l_records",
    "document_chunks",
    "fact_documents",
    "fact_qa",
    "featurize",
    "featurize_all",
    "in_context_prompt",
    "in_context_view",
    "load_squad",
    "student_view",
    "synthetic_documents",
    "synthetic_qa",
    "visible_document",
    "window_document",
]
GENERATORS = ("d2l_synth", "d2l_facts")
QA_FORMATS = {"d2l_squad": "squad", "d2l_drop": "drop", "d2l_ropes": "ropes"}  # data.name -> load_squad's fmt
CHUNKINGS = ("tokens", "sentences")  # algo.encoder.chunking: how `document_chunks` splits a document
SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)")  # the whitespace after a sentence starts the next sentence's piece


def _split_by_doc(records: list[dict[str, Any]], num_train: int, num_eval: int) -> tuple[list, list]:
    """First `num_train` documents for training, the last `num_eval` (disjoint) held out."""
    doc_ids = sorted({r["doc_id"] for r in records})
    if len(doc_ids) < num_eval + 1:
        raise DataError(f"only {len(doc_ids)} documents: cannot hold out {num_eval} and still train")
    held = set(doc_ids[len(doc_ids) - num_eval :]) if num_eval else set()
    train_ids = set([d for d in doc_ids if d not in held][:num_train])
    return [r for r in records if r["doc_id"] in train_ids], [r for r in records if r["doc_id"] in held]


def d2l_records(data_cfg: DictConfig, tokenizer: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held-out) QA records for `data_cfg`; held-out documents never appear in training. `tokenizer`: the
    run's, for documents padded to a length in tokens (`d2l_facts`' `train_doc_tokens`, `eval_doc_tokens`)."""
    params = dict(data_cfg.params)
    if data_cfg.source == "generator":
        if data_cfg.name not in GENERATORS:
            raise DataError(f"data.name={data_cfg.name!r} has no D2L generator (available: {', '.join(GENERATORS)})")
        if data_cfg.name == "d2l_facts":
            params["tokenizer"] = tokenizer
            make: Any = fact_qa
        else:
            make = synthetic_qa
        try:
            train = make(data_cfg.num_train, seed=data_cfg.seed, held_out=False, **params)
            held = make(data_cfg.num_eval, seed=data_cfg.seed, held_out=True, **params)
        except ValueError as ex:
            raise DataError(f"data={data_cfg.name}: {ex}") from None
        return train, held
    if not data_cfg.path:
        raise DataError(
            f"data.source={data_cfg.source} needs data.path (a file, or a hub name such as rajpurkar/squad)"
        )
    fmt = QA_FORMATS.get(str(data_cfg.name), "squad")
    eval_split = params.get("eval_split")
    if eval_split:  # separate hub split for held-out documents
        train = _split_by_doc(load_squad(data_cfg.path, data_cfg.split, fmt=fmt), data_cfg.num_train, 0)[0]
        held_all = load_squad(data_cfg.path, eval_split, fmt=fmt)
        return train, _split_by_doc(held_all, 0, min(data_cfg.num_eval, len({r["doc_id"] for r in held_all}) - 1))[1]
    return _split_by_doc(load_squad(data_cfg.path, data_cfg.split, fmt=fmt), data_cfg.num_train, data_cfg.num_eval)


# The instructed in-context baseline's request (issue 62: the bare document and question may under-read the model)
INSTRUCTION = "Read the document below, then answer the question about it."


def in_context_prompt(document: str, question: str, instructed: bool = False) -> str:
    """The user turn of the in-context baselines: the document then the question, bare or after INSTRUCTION."""
    if instructed:
        return f"{INSTRUCTION}\n\nDocument:\n{document}\n\nQuestion: {question}"
    return f"{document}\n\n{question}"


def visible_document(document: str, tokenizer: Any, max_doc_length: int, max_chunks: int = 1) -> tuple[list[int], str]:
    """What D2L reads of `document`: its first `max_doc_length * max_chunks` tokens, and the same tokens as text.

    The hypernet reads the ids (in chunks of `max_doc_length`); the in-context teacher and baseline read the text,
    so both see the same document (a cut inside a multi-byte character or a merge may retokenize differently at
    the very end of the cut text).
    """
    ids = tokenizer(document, add_special_tokens=False)["input_ids"]
    cap = max_doc_length * max_chunks
    if len(ids) <= cap:
        return ids, document
    return ids[:cap], tokenizer.decode(ids[:cap])


def chunks_of(ids: list[int], max_doc_length: int) -> list[list[int]]:
    """The encoder's chunks of a visible document: consecutive runs of at most `max_doc_length` tokens."""
    return [ids[i : i + max_doc_length] for i in range(0, len(ids), max_doc_length)]


def document_chunks(
    document: str, tokenizer: Any, max_doc_length: int, max_chunks: int = 1, chunking: str = "tokens"
) -> tuple[list[list[int]], str]:
    """The encoder's chunks of `document` (at most `max_chunks`) and the text they hold (what the in-context teacher
    and baseline read). `tokens`: consecutive runs of `max_doc_length` tokens. `sentences`: one chunk per sentence
    (a sentence ends at `.`, `!` or `?` before whitespace), a sentence longer than `max_doc_length` tokens going on
    in the next chunk; so each chunk's LoRA is generated from one fact statement, and the document's LoRA is their
    sum."""
    if chunking == "tokens":
        ids, text = visible_document(document, tokenizer, max_doc_length, max_chunks)
        return chunks_of(ids, max_doc_length), text
    if chunking != "sentences":
        raise ValueError(f"chunking={chunking!r} is not one of {', '.join(CHUNKINGS)}")
    chunks: list[list[int]] = []
    kept: list[str] = []
    for piece in SENTENCE_END.split(document):
        ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        room = max_chunks - len(chunks)
        parts = chunks_of(ids, max_doc_length)
        if len(parts) > room:  # the document is cut inside this sentence
            chunks += parts[:room]
            kept.append(tokenizer.decode([t for p in parts[:room] for t in p]) if room else "")
            break
        chunks += parts
        kept.append(piece)
    return chunks, "".join(kept)


def _reply(record: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": record.get("reply") or record["answer"]}]


def student_view(record: dict[str, Any], tokenizer: Any, max_length: int | None = None) -> dict[str, list[int]]:
    """`input_ids`/`attention_mask`/`labels` of the record's question alone, labels on its reply (`reply`, else
    `answer`): what D2L's student and the no-context baseline read."""
    from posttrain.data.chat import assistant_labels

    return assistant_labels(tokenizer, [{"role": "user", "content": record["question"]}] + _reply(record), max_length)


def in_context_view(
    document: str, record: dict[str, Any], tokenizer: Any, max_length: int, doc_tokens: int, instructed: bool = False
):
    """`input_ids`/`labels` of `document` + the record's question (`in_context_prompt`), labels on its reply
    (`doc_tokens`: the document's length, added to the `max_length` of question + reply, + a few tokens where a cut
    text retokenizes differently, + the instruction's)."""
    from posttrain.data.chat import assistant_labels

    prompt = in_context_prompt(document, record["question"], instructed)
    messages = [{"role": "user", "content": prompt}] + _reply(record)
    return assistant_labels(tokenizer, messages, max_length + doc_tokens + (32 if instructed else 8))


def window_document(record: dict[str, Any], tokenizer: Any, max_length: int, window: int) -> str:
    """The record's document cut (its first tokens) so that document + question + reply fit in `window` tokens:
    what a model granted a context window of `window` tokens reads in context."""
    student = student_view(record, tokenizer)
    budget = window - len(student["input_ids"]) - 4  # + the separator between document and question
    for _ in range(4):  # a cut text can retokenize a few tokens longer: shrink by the excess and retry
        if budget <= 0:
            break
        ids, text = visible_document(record["document"], tokenizer, budget)
        excess = len(in_context_view(text, record, tokenizer, max_length, len(ids))["input_ids"]) - window
        if excess <= 0:
            return text
        budget -= excess
    raise DataError(
        f"a context window of {window} tokens leaves no room for the document of {record['question']!r} "
        f"(question + reply: {len(student['input_ids'])} tokens): raise algo.context_window"
    )


def featurize(
    record: dict[str, Any],
    tokenizer: Any,
    max_length: int,
    max_doc_length: int,
    max_chunks: int = 1,
    chunking: str = "tokens",
) -> dict[str, Any]:
    """Token ids for one record: the visible document `ctx_ids` and its `ctx_chunks` (of at most `max_doc_length`
    tokens each, at most `max_chunks`, split by `chunking`: `document_chunks`), student `input_ids/labels`, teacher
    `t_input_ids/t_labels` (the teacher reads exactly the visible document). The labelled reply is the record's
    `reply` if it has one, else `answer`."""
    import torch

    from posttrain.data.chat import IGNORE_INDEX, check_labels

    chunks, document = document_chunks(record["document"], tokenizer, max_doc_length, max_chunks, chunking)
    ctx = [t for c in chunks for t in c]
    if not ctx:
        raise DataError(f"the document of {record['question']!r} is empty: nothing to internalize")
    student = student_view(record, tokenizer, max_length)
    teacher = in_context_view(document, record, tokenizer, max_length, len(ctx))
    for name, view in (("student", student), ("in-context", teacher)):
        check_labels(torch.tensor(view["labels"]), where=f"{name} view of {record['question']!r}")
    n_s = sum(t != IGNORE_INDEX for t in student["labels"])
    n_t = sum(t != IGNORE_INDEX for t in teacher["labels"])
    if n_s != n_t:
        raise DataError(
            f"answer of {record['question']!r} truncated differently with and without the document "
            f"({n_s} vs {n_t} tokens): raise algo.max_length"
        )
    return {
        "ctx_ids": ctx,
        "ctx_chunks": chunks,
        "input_ids": student["input_ids"],
        "labels": student["labels"],
        "t_input_ids": teacher["input_ids"],
        "t_labels": teacher["labels"],
    }


PARALLEL_MIN_RECORDS = 4096  # fewer are featurized in this process: starting the workers costs more than it saves


def featurize_all(
    records: list[dict[str, Any]],
    tokenizer: Any,
    max_length: int,
    max_doc_length: int,
    max_chunks: int = 1,
    chunking: str = "tokens",
    num_proc: int | None = None,
) -> list[dict[str, Any]]:
    """`featurize` over `records`, in order. Tens of thousands of records (~1.5 ms each: chat templates and three
    tokenizations) are split over `num_proc` processes with `datasets.map` (default: one per CPU, at most 8)."""
    procs = num_proc if num_proc is not None else min(8, os.cpu_count() or 1)
    if procs <= 1 or len(records) < PARALLEL_MIN_RECORDS:
        return [featurize(r, tokenizer, max_length, max_doc_length, max_chunks, chunking) for r in records]
    from datasets import Dataset

    table = Dataset.from_list(records)
    rows = table.map(
        featurize,
        fn_kwargs={
            "tokenizer": tokenizer,
            "max_length": max_length,
            "max_doc_length": max_doc_length,
            "max_chunks": max_chunks,
            "chunking": chunking,
        },
        remove_columns=table.column_names,
        num_proc=procs,
        new_fingerprint=uuid.uuid4().hex,  # hashing the tokenizer for the cache key costs seconds, for nothing
        desc="featurizing D2L questions",
    )
    return rows.to_list()
