"""One evaluation condition of D2L's held-out evaluation (`evaluate.py`): per question, the view whose reply is
scored (answer NLL, with or without a generated LoRA), the greedy reply to its prompt scored against the gold
answers, and the condition's means with 95% CIs that resample documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from posttrain.algos.d2l.baselines import lm_answer_logits
from posttrain.algos.d2l.batching import view_batch
from posttrain.algos.d2l.binding import MARGIN, PREFERRED
from posttrain.algos.d2l.lora import GeneratedLoRA
from posttrain.algos.d2l.scoring import score
from posttrain.analysis.stats import bootstrap_ci

METRICS = {"accuracy": "correct", "exact_match": "em", "f1": "f1"}  # summary name -> per-question key


@dataclass
class Task:
    """What one condition asks: per question index in `items`, the view whose reply is scored, the prompt answered
    greedily, the gold answers, and the document whose generated LoRA is applied (None: no generated LoRA)."""

    items: list[int]
    views: list[dict[str, Any]]
    prompts: list[str]
    golds: list[list[str]]
    lora_docs: list[int] | None = None


@torch.no_grad()
def answer_nll(model: Any, batch: dict[str, torch.Tensor], lora: GeneratedLoRA | None) -> tuple[list[float], list[int]]:
    """Per row of `batch`: (sum of answer-token NLL, answer-token count) with `lora` applied (None: bare base)."""
    model.apply_lora(lora)
    try:
        logits, targets, rows = lm_answer_logits(model.base, batch)
    finally:
        model.reset()
    nll = F.cross_entropy(logits, targets, reduction="none")
    n = batch["labels"].shape[0]
    sums = torch.zeros(n, device=nll.device).index_add_(0, rows, nll)
    counts = torch.zeros(n, dtype=torch.long, device=rows.device).index_add_(0, rows, torch.ones_like(rows))
    return sums.tolist(), counts.tolist()


def golds(record: dict[str, Any]) -> list[str]:
    return list(record.get("answers") or [record["answer"]])


def run_task(
    model: Any, task: Task, all_lora: GeneratedLoRA | None, batch_size: int, max_new_tokens: int, generate: bool
) -> dict[int, dict[str, Any]]:
    """{question index: {nll, tokens[, response, correct, em, f1]}} of one condition."""
    out: dict[int, dict[str, Any]] = {}
    pad = model.tokenizer.pad_token_id
    for i in range(0, len(task.items), batch_size):
        part = slice(i, i + batch_size)
        lora = None
        if task.lora_docs is not None and all_lora is not None:
            lora = all_lora.select(task.lora_docs[part])
        batch = {k: v.to(model.device) for k, v in view_batch(task.views[part], pad).items()}
        sums, counts = answer_nll(model, batch, lora)
        responses = model.generate(task.prompts[part], lora, max_new_tokens) if generate else [None] * len(sums)
        for j, s, n, resp, gold in zip(task.items[part], sums, counts, responses, task.golds[part]):
            out[j] = {"nll": s, "tokens": n} | ({"response": resp, **score(resp, gold)} if generate else {})
    return out


def summarize_condition(per: dict[int, dict[str, Any]], doc_index: list[int]) -> dict[str, Any]:
    """Means over the condition's questions, with 95% CIs that resample documents."""
    items = sorted(per)
    clusters = [doc_index[j] for j in items]
    nll, tokens = [per[j]["nll"] for j in items], [float(per[j]["tokens"]) for j in items]
    entry: dict[str, Any] = {
        "n": len(items),
        "answer_loss": sum(nll) / max(sum(tokens), 1.0),
        "answer_loss_ci95": bootstrap_ci(nll, tokens, clusters=clusters),
    }
    for name, key in (*METRICS.items(), ("own_fact", "own_fact"), (MARGIN, MARGIN), (PREFERRED, PREFERRED)):
        having = [j for j in items if key in per[j]]  # the margins: paired questions whose reply states the answer
        if having:
            values = [float(per[j][key]) for j in having]
            entry[name] = sum(values) / len(values)
            entry[f"{name}_ci95"] = bootstrap_ci(values, clusters=[doc_index[j] for j in having])
    return entry
