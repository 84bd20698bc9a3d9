"""Held-out evaluation of D2L against its baselines, on documents never seen in training.

Conditions (`config.EVAL_CONDITIONS`; the same questions and gold answers unless said otherwise):
- `no_context`: the base model, question only;
- `in_context`: the document as D2L reads it (`max_doc_length` x `max_chunks` tokens) in the prompt; questions
  whose prompt would exceed the model's positions are left out of it (the condition, when that is all of them);
- `in_context_truncated`: the document cut so that it and the question fit in `context_window` tokens (the fair
  in-context baseline for a model granted that window; the CD teacher reads the same cut);
- `in_context_instructed`: `in_context` with the document and question after `data.d2l.INSTRUCTION` (named only);
- `retrieval_bm25`: the document's sentences BM25 ranks best for the question, as many as fit the window of
  `in_context_truncated`, in document order (`retrieval.py`; named only);
- `d2l`: the LoRA generated from the question's document, question only;
- `d2l_other_doc`: the LoRA generated from another held-out document (`other_doc`), same question;
- `d2l_other_entity`: the question's document's LoRA, asked another document's question of the same kind (records
  with a `kind`): scored against that other document's answer (a LoRA that binds its facts to its entity is no help
  there), and `own_fact` counts responses stating this document's answer to the same kind of question instead;
  `d2l` and `d2l_other_entity` also get the binding margins of `binding.py` (likelihood, no generation needed);
- `in_context_other_entity`: the same pairing with the question's document in the prompt (as `in_context` reads
  it) instead of its LoRA, scored the same way, with the margins of `in_context` beside it: the reference for
  binding, what the base model does with a document it reads;
- `format_lora`, `cd`: the PEFT adapter baselines of `baselines.py` (cd on the first `cd_max_docs` documents).
Metrics: answer loss (token-mean NLL of the reference reply), and of greedy responses accuracy (a gold answer in the
response), SQuAD exact match and F1 (`scoring.py`); 95% bootstrap CIs resample documents, not questions (the
questions about one document are not independent). `per_question` holds every number per question (with the
document's length in tokens and whether its evidence lies inside the truncated window), so that CIs, seeds and
paired differences can be recomputed. Timings: `internalize_ms_per_doc` (D2L: one forward, batch of one, median
over the first 8 documents), `cd_ms_per_doc` (median wall time of a document's distillation), `format_lora_train_s`.

The CD teacher's document is cut to the window (`baselines.teacher_document`) so that it, the longest probe and
`max_new_tokens` of answer fit: for the documents that fit the window whole, the same document D2L reads.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from tqdm.auto import tqdm

from posttrain.algos.d2l.baselines import distilled_lora, format_lora, teacher_document
from posttrain.algos.d2l.binding import OTHER_ENTITY, swapped_record, value_margins
from posttrain.algos.d2l.condition import Task, golds, run_task, summarize_condition
from posttrain.algos.d2l.config import EVAL_CONDITIONS, OPT_IN_CONDITIONS
from posttrain.algos.d2l.locality import other_entity_pairs
from posttrain.algos.d2l.lora import GeneratedLoRA
from posttrain.algos.d2l.monitor import document_index
from posttrain.algos.d2l.retrieval import retrieved_document
from posttrain.algos.d2l.scoring import best_over, contains_answer
from posttrain.data.d2l import (
    document_chunks,
    featurize,
    featurize_all,
    in_context_prompt,
    in_context_view,
    student_view,
    window_document,
)


@torch.no_grad()
def internalize_latency_ms(model: Any, docs: list[str], repeats: int = 1) -> float:
    """Median wall time of `internalize(doc)` (one document at a time), after one warm-up call."""
    model.internalize(docs[0])
    times = []
    for d in docs:
        for _ in range(repeats):
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.internalize(d)
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def wanted_conditions(conditions: Any, baselines: Any, has_pairs: bool) -> list[str]:
    """The conditions to evaluate: `conditions` (None: every one that applies) in EVAL_CONDITIONS order."""
    applies = {
        "format_lora": bool(baselines is not None and baselines.format_lora_steps),
        "cd": bool(baselines is not None and baselines.cd_steps),
        "d2l_other_entity": has_pairs,
        "in_context_other_entity": has_pairs,
    }
    if conditions is None:
        return [c for c in EVAL_CONDITIONS if applies.get(c, True) and c not in OPT_IN_CONDITIONS]
    missing = [c for c in conditions if not applies.get(c, True)]
    if missing:
        raise ValueError(f"condition {missing[0]} does not apply (no steps configured, or questions without kinds)")
    return [c for c in EVAL_CONDITIONS if c in conditions]


def _swapped_nll(
    model: Any,
    records: list[dict[str, Any]],
    pairs: list[int | None],
    per: dict[str, dict[int, dict[str, Any]]],
    carriers: dict[str, tuple[Any, list[int] | None]],
    all_lora: GeneratedLoRA,
    batch_size: int,
) -> dict[str, dict[int, float]]:
    """Per condition of `carriers` ({own-question condition: (view of (j, record) with j's document as the
    carrier, LoRA document per question or None)}) and each paired question j it scored, the NLL sum of the reply
    with the value swapped (`binding.py`): on the own question j's reply stating its pair's value, on the other
    entity's (`OTHER_ENTITY`) the pair's reply stating j's value."""
    out: dict[str, dict[int, float]] = {}
    for own, (view_of, lora_docs) in carriers.items():
        for cond in (own, OTHER_ENTITY[own]):
            items, views = [], []
            for j in sorted(per.get(cond, {})):
                p = pairs[j]
                if p is None:
                    continue
                swapped = (
                    swapped_record(records[j], records[p]["answer"])
                    if cond == own
                    else swapped_record(records[p], records[j]["answer"])
                )
                if swapped is not None:
                    items.append(j)
                    views.append(view_of(j, swapped))
            docs = None if lora_docs is None else [lora_docs[j] for j in items]
            task = Task(items, views, [""] * len(items), [[]] * len(items), docs)
            out[cond] = {j: e["nll"] for j, e in run_task(model, task, all_lora, batch_size, 0, False).items()}
    return out


@torch.no_grad()
def evaluate_model(
    model: Any,
    records: list[dict[str, Any]],
    max_length: int,
    max_new_tokens: int = 12,
    batch_size: int = 16,
    generate: bool = True,
    *,
    context_window: int | None = None,
    conditions: list[str] | None = None,
    baselines: Any = None,
    train_records: list[dict[str, Any]] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Metrics per condition over held-out `records` ({document, question, answer[, answers, kind]}); documents
    are read as the model reads them (`model.max_doc_length` tokens per chunk, `model.max_chunks` chunks).
    `baselines`: `algo.baselines` (format_lora needs `train_records`); `context_window` None: the model's
    positions."""
    was_training = model.training
    model.train(False)
    tok = model.tokenizer
    docs, doc_index = document_index(records)
    if len(docs) < 2:
        raise ValueError("evaluation needs at least two held-out documents (the other-document control)")
    positions = int(model.base.config.max_position_embeddings)
    window = int(context_window or positions)
    read = model.reading
    rows = [featurize(r, tok, max_length, **read) for r in records]
    seen = [document_chunks(d, tok, **read)[1] for d in docs]
    cut = [window_document(r, tok, max_length, window) for r in records]
    doc_tokens = [len(tok(d, add_special_tokens=False)["input_ids"]) for d in docs]
    other = [(d + 1) % len(docs) for d in range(len(docs))]
    pairs = other_entity_pairs(records, doc_index, len(docs))
    wanted = wanted_conditions(conditions, baselines, any(p is not None for p in pairs))
    everyone = list(range(len(records)))
    student = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]
    questions = [r["question"] for r in records]
    gold = [golds(r) for r in records]
    fits = [j for j in everyone if len(rows[j]["t_input_ids"]) <= positions]
    paired = [j for j in everyone if pairs[j] is not None]

    def in_context_of(j: int, record: dict[str, Any]) -> dict[str, Any]:  # j's document, `record`'s question
        return in_context_view(seen[doc_index[j]], record, tok, max_length, len(rows[j]["ctx_ids"]))

    read_other: dict[int, dict[str, Any]] = {}  # j -> j's document with its pair's question, where it fits
    if "in_context_other_entity" in wanted:
        fitting = set(fits)
        read_other = {j: in_context_of(j, records[pairs[j]]) for j in paired if j in fitting}  # type: ignore[index]
        read_other = {j: v for j, v in read_other.items() if len(v["input_ids"]) <= positions}
    instructed: dict[int, dict[str, Any]] = {}  # j -> j's document and question after the instruction, where it fits
    if "in_context_instructed" in wanted:
        instructed = {
            j: in_context_view(seen[doc_index[j]], records[j], tok, max_length, len(rows[j]["ctx_ids"]), True)
            for j in fits
        }
        instructed = {j: v for j, v in instructed.items() if len(v["input_ids"]) <= positions}
    retrieved = [retrieved_document(r, tok, max_length, window) for r in records] if "retrieval_bm25" in wanted else []
    able_of = (("in_context", fits), ("in_context_other_entity", read_other), ("in_context_instructed", instructed))
    for cond, able in able_of:
        if not able and cond in wanted:  # no question's document fits the model's positions
            wanted.remove(cond)
    tasks = {
        "no_context": Task(everyone, student, questions, gold),
        "in_context": Task(
            fits,
            [{"input_ids": rows[j]["t_input_ids"], "labels": rows[j]["t_labels"]} for j in fits],
            [in_context_prompt(seen[doc_index[j]], questions[j]) for j in fits],
            [gold[j] for j in fits],
        ),
        "in_context_truncated": Task(
            everyone,
            [in_context_view(cut[j], records[j], tok, max_length, window) for j in everyone],
            [in_context_prompt(cut[j], questions[j]) for j in everyone],
            gold,
        ),
        "in_context_instructed": Task(
            list(instructed),
            list(instructed.values()),
            [in_context_prompt(seen[doc_index[j]], questions[j], instructed=True) for j in instructed],
            [gold[j] for j in instructed],
        ),
        "retrieval_bm25": Task(
            everyone if retrieved else [],
            [in_context_view(retrieved[j], records[j], tok, max_length, window) for j in everyone if retrieved],
            [in_context_prompt(retrieved[j], questions[j]) for j in everyone if retrieved],
            gold if retrieved else [],
        ),
        "d2l": Task(everyone, student, questions, gold, doc_index),
        "d2l_other_doc": Task(everyone, student, questions, gold, [other[d] for d in doc_index]),
        "d2l_other_entity": Task(
            paired,
            [student[pairs[j]] for j in paired],  # type: ignore[index]  # paired: pairs[j] is set
            [questions[pairs[j]] for j in paired],  # type: ignore[index]
            [gold[pairs[j]] for j in paired],  # type: ignore[index]
            [doc_index[j] for j in paired],
        ),
        "in_context_other_entity": Task(
            list(read_other),
            list(read_other.values()),
            [in_context_prompt(seen[doc_index[j]], questions[pairs[j]]) for j in read_other],  # type: ignore[index]
            [gold[pairs[j]] for j in read_other],  # type: ignore[index]
        ),
    }
    all_lora = GeneratedLoRA.cat([model.internalize(docs[i : i + batch_size]) for i in range(0, len(docs), batch_size)])
    per: dict[str, dict[int, dict[str, Any]]] = {}
    todo = [c for c in wanted if c in tasks]
    for cond in tqdm(todo, desc="evaluating conditions", unit="condition", leave=False, disable=not todo):
        per[cond] = run_task(model, tasks[cond], all_lora, batch_size, max_new_tokens, generate)
    if generate:
        for cond in OTHER_ENTITY.values():
            for j, entry in per.get(cond, {}).items():
                entry["own_fact"] = best_over(contains_answer, entry["response"], gold[j])
    carriers: dict[str, tuple[Any, list[int] | None]] = {
        "d2l": (lambda j, record: student_view(record, tok, max_length), doc_index)
    }
    if "in_context_other_entity" in per:  # the in-context reference, only where it is asked for
        carriers["in_context"] = (in_context_of, None)
    value_margins(_swapped_nll(model, records, pairs, per, carriers, all_lora, batch_size), per)
    result: dict[str, Any] = {
        "num_docs": len(docs),
        "num_questions": len(records),
        "context_window": window,
        "conditions": wanted,
        "internalize_ms_per_doc": internalize_latency_ms(model, docs[:8]),
    }
    if "format_lora" in wanted:
        if not train_records:
            raise ValueError("the format-only LoRA needs the training records")
        train_rows = featurize_all(train_records, tok, max_length, **read)
        b = baselines
        with format_lora(
            model, train_rows, steps=b.format_lora_steps, lr=b.format_lora_lr, batch_size=b.format_lora_batch_size,
            seed=seed,
        ) as seconds:  # fmt: skip
            per["format_lora"] = run_task(model, tasks["no_context"], None, batch_size, max_new_tokens, generate)
        result["format_lora_train_s"] = seconds
    if "cd" in wanted:
        per["cd"], times = _distill_each(
            model, records, doc_index, docs, student, gold, window, baselines, seed,
            max_length=max_length, max_new_tokens=max_new_tokens, batch_size=batch_size, generate=generate,
        )  # fmt: skip
        result["cd_docs"] = len(times)
        result["cd_ms_per_doc"] = statistics.median(times) * 1000
    for cond in wanted:
        result[cond] = summarize_condition(per[cond], doc_index)
    result["examples"] = [
        {"question": r["question"], "answer": r["answer"], **{c: per[c][j]["response"] for c in per if j in per[c]}}
        for j, r in enumerate(records[:5])
        if generate
    ]
    result["per_question"] = [
        {
            "doc": doc_index[j],
            "other_doc": other[doc_index[j]],
            "question": r["question"],
            "answer": r["answer"],
            "answers": gold[j],
            "kind": r.get("kind"),
            "hops": r.get("hops"),
            "doc_tokens": doc_tokens[doc_index[j]],
            "in_window": _in_window(r, cut[j]),
            **({"retrieved_answer": best_over(contains_answer, retrieved[j], gold[j])} if retrieved else {}),
            **{c: per[c][j] for c in per if j in per[c]},
        }
        for j, r in enumerate(records)
    ]
    model.train(was_training)
    return result


def _distill_each(
    model: Any,
    records: list[dict[str, Any]],
    doc_index: list[int],
    docs: list[str],
    student: list[dict[str, Any]],
    gold: list[list[str]],
    window: int,
    baselines: Any,
    seed: int,
    *,
    max_length: int,
    max_new_tokens: int,
    batch_size: int,
    generate: bool,
) -> tuple[dict[int, dict[str, Any]], list[float]]:
    """Per-document context distillation on the first `cd_max_docs` documents: each document's own fresh LoRA
    answers its questions; the wall time of each distillation."""
    b = baselines
    count = len(docs) if not b.cd_max_docs else min(int(b.cd_max_docs), len(docs))
    per: dict[int, dict[str, Any]] = {}
    times = []
    for d in tqdm(range(count), desc=f"context distillation ({b.cd_steps} steps per document)", unit="doc"):
        items = [j for j, dj in enumerate(doc_index) if dj == d]
        if b.cd_probes == "probes":
            if not records[items[0]].get("probes"):
                raise ValueError("algo.baselines.cd_probes=probes but the records have no probe questions")
            probes = list(records[items[0]]["probes"])
        else:  # the paper's oracle CD: the evaluated questions themselves, answered by the teacher
            probes = [records[j]["question"] for j in items]
        document = teacher_document(model, docs[d], probes, window, max_new_tokens)
        task = Task(
            items, [student[j] for j in items], [records[j]["question"] for j in items], [gold[j] for j in items]
        )
        with distilled_lora(
            model, document, probes, steps=b.cd_steps, lr=b.cd_lr, top_k=b.cd_top_k, max_length=max_length,
            max_new_tokens=max_new_tokens, seed=seed + d,
        ) as seconds:  # fmt: skip
            per.update(run_task(model, task, None, batch_size, max_new_tokens, generate))
        times.append(seconds)
    return per, times


def _in_window(record: dict[str, Any], cut: str) -> bool | None:
    """Whether everything the question needs lies inside the truncated document (None: not known)."""
    end = record.get("evidence_end")
    if end is None and record.get("answer_start") is not None:
        end = int(record["answer_start"]) + len(record["answer"])
    return None if end is None else end <= len(cut)
