"""Dataset of featurized D2L examples and the collator (right padding; a document's chunks are rows of `ctx_ids`
with `ctx_doc` naming their example; the other-entity view `o_*` when the rows carry it (`locality.py`); teacher
top-k rows concatenated in the row-major order of the answer positions, which is the order `answer_logits` selects
them in)."""

from __future__ import annotations

from typing import Any

import torch

from posttrain.data.chat import IGNORE_INDEX


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]


def _pad(seqs: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [value] * (width - len(s)) for s in seqs], dtype=torch.long)


def _mask(seqs: list[list[int]]) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    return torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], dtype=torch.long)


class D2LCollator:
    def __init__(self, pad_id: int, teacher: bool = False):
        self.pad_id, self.teacher = pad_id, teacher

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        chunks = [r.get("ctx_chunks") or [r["ctx_ids"]] for r in rows]
        flat = [c for doc in chunks for c in doc]
        batch = {
            "ctx_ids": _pad(flat, self.pad_id),
            "ctx_mask": _mask(flat),
            "ctx_doc": torch.tensor([i for i, doc in enumerate(chunks) for _ in doc], dtype=torch.long),
            "input_ids": _pad([r["input_ids"] for r in rows], self.pad_id),
            "attention_mask": _mask([r["input_ids"] for r in rows]),
            "labels": _pad([r["labels"] for r in rows], IGNORE_INDEX),
        }
        if "o_input_ids" in rows[0]:  # the other-entity view (posttrain.algos.d2l.locality)
            batch["o_input_ids"] = _pad([r["o_input_ids"] for r in rows], self.pad_id)
            batch["o_attention_mask"] = _mask([r["o_input_ids"] for r in rows])
            batch["o_labels"] = _pad([r["o_labels"] for r in rows], IGNORE_INDEX)
            batch["o_keep"] = torch.tensor([bool(r["o_keep"]) for r in rows])
        if self.teacher and "t_idx" in rows[0]:  # the monitor's rows (posttrain.algos.d2l.monitor) carry none
            batch["t_idx"] = torch.cat([torch.as_tensor(r["t_idx"]) for r in rows]).long()
            batch["t_logp"] = torch.cat([torch.as_tensor(r["t_logp"]) for r in rows]).float()
        return batch


def view_batch(views: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """`input_ids`/`labels` views (one prompt + reply each), right padded, with their attention mask."""
    return {
        "input_ids": _pad([v["input_ids"] for v in views], pad_id),
        "attention_mask": _mask([v["input_ids"] for v in views]),
        "labels": _pad([v["labels"] for v in views], IGNORE_INDEX),
    }


def teacher_batch(rows: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """The in-context view (document + question) of `rows`, right padded."""
    return view_batch([{"input_ids": r["t_input_ids"], "labels": r["t_labels"]} for r in rows], pad_id)
