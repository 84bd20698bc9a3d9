"""Held-out evaluation of D2L against its baselines, on documents never seen in training.

Conditions (same questions, same answers):
- `no_context`: the base model, question only;
- `in_context`: the base model with the document in the prompt;
- `d2l`: the base model + the LoRA generated from the document, question only;
- `d2l_other_doc`: the LoRA generated from a *different* held-out document (control: is the LoRA document-specific
  or only a generic answer-format prior?).
Metrics: answer loss (token-mean CE on answer tokens), and of greedy answers: answer accuracy (the answer appears
in the response as whole words, case-insensitive: "Mukaton lives in Oslo." is right for "Oslo"), exact match and
ROUGE-L F1; 95% bootstrap CIs over questions for answer loss and accuracy; the per-question numbers
(`per_question`) so that CIs and paired differences can be recomputed; and the internalization latency (ms per
document, batch of one).
"""

from __future__ import annotations

import re
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from posttrain.algos.d2l.batching import D2LCollator, teacher_batch
from posttrain.algos.d2l.encoder import backbone_of
from posttrain.algos.d2l.lora import GeneratedLoRA
from posttrain.analysis.stats import bootstrap_ci
from posttrain.data.chat import IGNORE_INDEX
from posttrain.data.d2l import featurize, in_context_prompt, visible_document

CONDITIONS = ("no_context", "in_context", "d2l", "d2l_other_doc")


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", text.lower())).strip()


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 over normalized whitespace tokens (LCS; rouge-score's formula without stemming)."""
    p, r = normalize(prediction).split(), normalize(reference).split()
    if not p or not r:
        return float(p == r)
    dp = [[0] * (len(r) + 1) for _ in range(len(p) + 1)]
    for i, a in enumerate(p):
        for j, b in enumerate(r):
            dp[i + 1][j + 1] = dp[i][j] + 1 if a == b else max(dp[i][j + 1], dp[i + 1][j])
    lcs = dp[-1][-1]
    if lcs == 0:
        return 0.0
    prec, rec = lcs / len(p), lcs / len(r)
    return 2 * prec * rec / (prec + rec)


def answer_in_response(prediction: str, answer: str) -> bool:
    """The answer occurs in the response as a run of whole words, after `normalize` (case, punctuation)."""
    a = normalize(answer)
    return bool(a) and f" {a} " in f" {normalize(prediction)} "


@torch.no_grad()
def _answer_nll(
    model: Any, batch: dict[str, torch.Tensor], lora: GeneratedLoRA | None
) -> tuple[list[float], list[int]]:
    """Per row of `batch`: (sum of answer-token NLL, answer-token count) with `lora` applied (None: bare base)."""
    model.apply_lora(lora)
    try:
        hidden = backbone_of(model.base)(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
        ).last_hidden_state
    finally:
        model.reset()
    labels = batch["labels"][:, 1:]
    sel = labels != IGNORE_INDEX
    logits = model.base.get_output_embeddings()(hidden[:, :-1][sel]).float()
    nll = F.cross_entropy(logits, labels[sel], reduction="none")
    row = torch.arange(labels.shape[0], device=labels.device).unsqueeze(1).expand_as(labels)[sel]
    sums = torch.zeros(labels.shape[0], device=nll.device).index_add_(0, row, nll)
    return sums.tolist(), sel.sum(1).tolist()


def _docs(records: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    docs: dict[str, int] = {}
    index = [docs.setdefault(r["document"], len(docs)) for r in records]
    return list(docs), index


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


@torch.no_grad()
def evaluate_model(
    model: Any,
    records: list[dict[str, Any]],
    max_length: int,
    max_new_tokens: int = 12,
    batch_size: int = 16,
    generate: bool = True,
) -> dict[str, Any]:
    """Metrics per condition over held-out `records` ({document, question, answer}); documents are read as the
    model reads them (`model.max_doc_length` tokens per chunk, `model.max_chunks` chunks), in context too."""
    was_training = model.training
    model.train(False)
    tok, device = model.tokenizer, model.device
    docs, doc_index = _docs(records)
    if len(docs) < 2:
        raise ValueError("evaluation needs at least two held-out documents (the other-document control)")
    read = {"max_doc_length": model.max_doc_length, "max_chunks": model.max_chunks}
    all_lora = GeneratedLoRA.cat([model.internalize(docs[i : i + batch_size]) for i in range(0, len(docs), batch_size)])
    other = [(i + 1) % len(docs) for i in range(len(docs))]
    collate = D2LCollator(tok.pad_token_id)
    nll: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    count: dict[str, list[int]] = {c: [] for c in CONDITIONS}
    preds: dict[str, list[str]] = {c: [] for c in CONDITIONS}
    for i in range(0, len(records), batch_size):
        chunk = records[i : i + batch_size]
        idx = doc_index[i : i + batch_size]
        rows = [featurize(r, tok, max_length, **read) for r in chunk]
        student = {k: v.to(device) for k, v in collate(rows).items()}
        teacher = {k: v.to(device) for k, v in teacher_batch(rows, tok.pad_token_id).items()}
        mine, theirs = all_lora.select(idx), all_lora.select([other[j] for j in idx])
        for cond, batch, lora in (
            ("no_context", student, None),
            ("in_context", teacher, None),
            ("d2l", student, mine),
            ("d2l_other_doc", student, theirs),
        ):
            s, n = _answer_nll(model, batch, lora)
            nll[cond] += s
            count[cond] += n
        if generate:
            questions = [r["question"] for r in chunk]
            preds["no_context"] += model.generate(questions, None, max_new_tokens)
            seen = [visible_document(r["document"], tok, **read)[1] for r in chunk]
            preds["in_context"] += model.generate(
                [in_context_prompt(d, r["question"]) for d, r in zip(seen, chunk)], None, max_new_tokens
            )
            preds["d2l"] += model.generate(questions, mine, max_new_tokens)
            preds["d2l_other_doc"] += model.generate(questions, theirs, max_new_tokens)
    result: dict[str, Any] = {"num_docs": len(docs), "num_questions": len(records)}
    answers = [r["answer"] for r in records]
    correct = {c: [float(answer_in_response(p, a)) for p, a in zip(preds[c], answers)] for c in preds}
    for cond in CONDITIONS:
        entry: dict[str, Any] = {
            "answer_loss": sum(nll[cond]) / max(sum(count[cond]), 1),
            "answer_loss_ci95": bootstrap_ci(nll[cond], [float(n) for n in count[cond]]),
        }
        if generate:
            entry["accuracy"] = sum(correct[cond]) / len(records)
            entry["accuracy_ci95"] = bootstrap_ci(correct[cond])
            entry["exact_match"] = sum(normalize(p) == normalize(a) for p, a in zip(preds[cond], answers)) / len(
                records
            )
            entry["rouge_l"] = sum(rouge_l(p, a) for p, a in zip(preds[cond], answers)) / len(records)
        result[cond] = entry
    result["internalize_ms_per_doc"] = internalize_latency_ms(model, docs[: min(len(docs), 32)])
    result["examples"] = (
        [
            {"question": r["question"], "answer": r["answer"], **{c: preds[c][j] for c in CONDITIONS}}
            for j, r in enumerate(records[:5])
        ]
        if generate
        else []
    )
    result["per_question"] = [
        {
            "doc": doc_index[j],
            "other_doc": other[doc_index[j]],
            "question": r["question"],
            "answer": r["answer"],
            **{
                c: {"nll": nll[c][j], "tokens": count[c][j]}
                | ({"response": preds[c][j], "correct": bool(correct[c][j])} if generate else {})
                for c in CONDITIONS
            },
        }
        for j, r in enumerate(records)
    ]
    model.train(was_training)
    return result
