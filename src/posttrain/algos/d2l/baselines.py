"""Adapter baselines for D2L's evaluation: PEFT LoRAs with the generated LoRA's rank, alpha, modules and layers,
trained on the frozen base while the generated-LoRA wrappers are out of the way (`D2LModel.plain_base`).

- `format_lora`: one LoRA trained with CE on the training questions' replies — the records and reply format D2L
  trains on — with no document anywhere: what an adapter learns from the QA format and the answer distribution.
- `distilled_lora`: per-document context distillation, the D2L paper's CD baseline: a fresh LoRA trained to match
  the base model reading the document in context (the teacher, no adapter) on the probe questions. The teacher
  answers each probe greedily; the student (question only, with the LoRA) is trained for `steps` full-batch AdamW
  steps, lr cosine-annealed to 0, on the KL to the teacher's top-k distribution at each answer token (renormalised
  on the top k, as D2L's own KL term; the paper's code uses the cross-entropy to the top-k probabilities, which
  has the same minimiser).

Each is a context manager: the adapter is active inside (ask questions with `model.generate(..., lora=None)` or
score with `answer_nll(model, batch, None)`), removed on exit; it yields the seconds its training took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import trange

from posttrain.algos.d2l.batching import D2LCollator
from posttrain.algos.d2l.encoder import backbone_of
from posttrain.algos.d2l.loss import topk_kl
from posttrain.algos.d2l.teacher import teacher_topk
from posttrain.data.chat import IGNORE_INDEX
from posttrain.data.d2l import featurize, in_context_prompt, visible_document


def lm_answer_logits(lm: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp32 logits [n, V] at the positions predicting labelled tokens, their targets [n], each one's row [n])."""
    hidden = backbone_of(lm)(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
    ).last_hidden_state
    labels = batch["labels"][:, 1:]
    sel = labels != IGNORE_INDEX
    rows = torch.arange(labels.shape[0], device=labels.device).unsqueeze(1).expand_as(labels)[sel]
    return lm.get_output_embeddings()(hidden[:, :-1][sel]).float(), labels[sel], rows


@contextmanager
def peft_lora(model: Any, seed: int) -> Iterator[list[torch.nn.Parameter]]:
    """A fresh PEFT LoRA (PEFT's init: A random, B zero; `seed`) on D2L's target modules of the plain base; yields
    its trainable parameters, unloads it on exit."""
    from peft import LoraConfig, get_peft_model

    spec = model.spec
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=list(model.wrappers), lora_dropout=0.0)
    with model.plain_base() as base, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft = get_peft_model(base, config)
        try:
            yield [p for p in peft.parameters() if p.requires_grad]
        finally:
            peft.unload()


def _fit(
    params: list[torch.nn.Parameter],
    steps: int,
    lr: float,
    loss_of_step: Callable[[int], torch.Tensor],
    desc: str | None = None,
) -> None:
    """`steps` AdamW steps on `loss_of_step(step)`, lr cosine-annealed from `lr` to 0 (a progress bar with `desc`)."""
    optimizer = torch.optim.AdamW(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1), eta_min=0.0)
    with torch.enable_grad():
        for step in trange(steps, desc=desc, unit="step", leave=False, disable=desc is None):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of_step(step)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"adapter baseline: non-finite loss {float(loss)} at step {step + 1}")
            loss.backward()
            optimizer.step()
            schedule.step()


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


@contextmanager
def format_lora(
    model: Any, train_rows: list[dict[str, Any]], *, steps: int, lr: float, batch_size: int, seed: int
) -> Iterator[float]:
    """The format-only LoRA: CE on the replies of featurized training rows (question only), batches of
    `batch_size` drawn in a `seed`ed order."""
    collate = D2LCollator(model.tokenizer.pad_token_id)
    order = torch.randperm(len(train_rows), generator=torch.Generator().manual_seed(seed)).tolist()

    def loss(step: int) -> torch.Tensor:
        picks = [order[(step * batch_size + j) % len(order)] for j in range(batch_size)]
        logits, targets, _ = lm_answer_logits(model.base, _to(collate([train_rows[i] for i in picks]), model.device))
        return F.cross_entropy(logits, targets)

    with peft_lora(model, seed) as params:
        start = time.perf_counter()
        _fit(params, steps, lr, loss, desc="format-only LoRA")
        yield time.perf_counter() - start


def teacher_document(model: Any, document: str, probes: list[str], window: int, max_new_tokens: int) -> str:
    """`document` cut so that it, the longest probe and `max_new_tokens` of answer fit in `window` tokens."""
    from posttrain.models.generation import render

    tok = model.tokenizer
    prompt = max(
        len(tok(render(tok, [{"role": "user", "content": p}]), add_special_tokens=False)["input_ids"]) for p in probes
    )
    budget = window - prompt - max_new_tokens - 8  # + the separator and the assistant header
    if budget <= 0:
        raise ValueError(f"a context window of {window} tokens leaves no room for the document (probes: {prompt})")
    return visible_document(document, tok, budget)[1]


@contextmanager
def distilled_lora(
    model: Any,
    document: str,
    probes: list[str],
    *,
    steps: int,
    lr: float,
    top_k: int,
    max_length: int,
    max_new_tokens: int,
    seed: int,
) -> Iterator[float]:
    """Context distillation of `document` (as the teacher may read it: cut to the window beforehand) into a fresh
    LoRA on `probes`; yields the wall time of the whole distillation (teacher answers, teacher top-k, training)."""
    start = time.perf_counter()
    answers = model.generate([in_context_prompt(document, p) for p in probes], None, max_new_tokens)
    records = [{"document": document, "question": p, "answer": a} for p, a in zip(probes, answers)]
    doc_len = len(model.tokenizer(document, add_special_tokens=False)["input_ids"])
    rows = [featurize(r, model.tokenizer, max_length, doc_len + 1) for r in records]
    top = teacher_topk(model, rows, top_k)
    t_idx = torch.cat([i for i, _ in top]).to(model.device)
    t_logp = torch.cat([lp for _, lp in top]).to(model.device)
    batch = _to(D2LCollator(model.tokenizer.pad_token_id)(rows), model.device)

    def loss(_step: int) -> torch.Tensor:
        return topk_kl(lm_answer_logits(model.base, batch)[0], t_idx, t_logp)

    with peft_lora(model, seed) as params:
        _fit(params, steps, lr, loss)
        yield time.perf_counter() - start
