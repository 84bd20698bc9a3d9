"""In-context teacher for KL distillation: the frozen base model reading document + question; its top-k
log-probs at each answer token are computed once and cached (safetensors, keyed by a hash of what they depend on:
the base model's config, seed, dtype and autocast, the exact teacher token ids, the tokenizer and chat template, k
and T). It computes in the caller's precision: the trainer runs it under its own autocast."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm.auto import trange

from posttrain.algos.d2l.batching import teacher_batch
from posttrain.algos.d2l.encoder import backbone_of
from posttrain.data.chat import IGNORE_INDEX


@torch.no_grad()
def teacher_topk(
    model: Any, rows: list[dict[str, Any]], k: int, temperature: float = 1.0, batch_size: int = 16
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row: (indices [n_answer, k] int32, log-probs [n_answer, k] fp32) of the in-context base model."""
    model.reset()
    lm = model.base
    device = model.device
    out = []
    # one batch (context distillation's per-document teacher) is too short for a bar of its own
    batches = trange(
        0, len(rows), batch_size, desc="teacher top-k (in-context base)", unit="batch", leave=False,
        disable=len(rows) <= batch_size,
    )  # fmt: skip
    for i in batches:
        chunk = rows[i : i + batch_size]
        batch = {k_: v.to(device) for k_, v in teacher_batch(chunk, model.tokenizer.pad_token_id).items()}
        hidden = backbone_of(lm)(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
        ).last_hidden_state
        labels = batch["labels"][:, 1:]
        for b in range(len(chunk)):
            sel = labels[b] != IGNORE_INDEX
            logp = F.log_softmax(lm.get_output_embeddings()(hidden[b, :-1][sel]).float() / temperature, dim=-1)
            vals, idx = logp.topk(min(k, logp.shape[-1]), dim=-1)
            out.append((idx.int().cpu(), vals.cpu()))
    return out


def cache_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """Hash of what decides the teacher's tokens: the vocabulary (added tokens included), the special tokens and
    the chat template's source."""
    return _digest(
        {
            "vocab": tokenizer.get_vocab(),
            "special": tokenizer.special_tokens_map,
            "template": tokenizer.chat_template,
            "class": type(tokenizer).__name__,
        }
    )


def teacher_cache_key(
    model: Any, rows: list[dict[str, Any]], k: int, temperature: float, key_parts: dict[str, Any]
) -> str:
    """`key_parts` (the base model's identity) + the exact teacher inputs (document, question and answer as rendered
    by the chat template: a changed template, tokenizer, truncation or data set gives other ids) + the tokenizer."""
    inputs = _digest([[list(map(int, r["t_input_ids"])), list(map(int, r["t_labels"]))] for r in rows])
    parts = {
        **key_parts,
        "k": k,
        "T": temperature,
        "n": len(rows),
        "inputs": inputs,
        "tokenizer": tokenizer_digest(model.tokenizer),
        "dtype": str(next(model.base.parameters()).dtype),
    }
    device = model.device.type
    if torch.is_autocast_enabled(device):  # fp32 weights under bf16 autocast compute other numbers than fp32
        parts["autocast"] = str(torch.get_autocast_dtype(device))
    return cache_key(parts)


def attach_teacher(
    model: Any, rows: list[dict[str, Any]], k: int, temperature: float, cache_dir: Path, key_parts: dict[str, Any]
) -> Path:
    """Add `t_idx`/`t_logp` to every row, from `cache_dir/teacher_topk_<hash>.safetensors` or computed (then saved)."""
    path = Path(cache_dir) / f"teacher_topk_{teacher_cache_key(model, rows, k, temperature, key_parts)}.safetensors"
    if path.is_file():
        flat = load_file(str(path))
        idx, logp, offsets = flat["idx"], flat["logp"], flat["offsets"].tolist()
        pairs = [(idx[a:b], logp[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    else:
        pairs = teacher_topk(model, rows, k, temperature)
        offsets = [0]
        for i_, _ in pairs:
            offsets.append(offsets[-1] + i_.shape[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        save_file(
            {
                "idx": torch.cat([p[0] for p in pairs]),
                "logp": torch.cat([p[1] for p in pairs]),
                "offsets": torch.tensor(offsets, dtype=torch.long),
            },
            str(tmp),
        )
        os.replace(tmp, path)  # a reader never sees half a file
    for row, (i_, lp) in zip(rows, pairs):
        row["t_idx"], row["t_logp"] = i_, lp
    return path
