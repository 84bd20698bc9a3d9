"""Does the generated LoRA carry the document? D2L's monitor during training (`algo.monitor_steps`).

Every `monitor_steps` steps the trainer evaluates the answer CE (nats per answer token: each eval batch's token mean,
averaged over the rows by HF's loop; one batch: the token mean) of the questions of the first
`monitor_docs` held-out and training documents twice: with the LoRA generated from the question's own document and
with the one generated from the next document (the `d2l_other_doc` pairing of the final evaluation). The logged
`eval_<split>_gap` is the second minus the first: how much the document helps. A hypernet that writes one
document-independent LoRA has gap ~0 on both splits; one that memorises its training documents has a training gap
that grows while the held-out gap stays ~0; one that reads documents has a held-out gap too. HF's `Trainer` runs it
(`eval_strategy="steps"` with a dict of eval datasets: `eval_heldout_loss`, `eval_heldout_other_loss`, ...).
"""

from __future__ import annotations

from typing import Any

from posttrain.algos.d2l.batching import ListDataset

KEYS = ("ctx_ids", "ctx_chunks", "input_ids", "labels")
SPLITS = ("heldout", "train")


def document_index(records: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """(the distinct documents in first-seen order, each record's position among them)."""
    docs: dict[str, int] = {}
    index = [docs.setdefault(r["document"], len(docs)) for r in records]
    return list(docs), index


def _first_docs(
    rows: list[dict[str, Any]], records: list[dict[str, Any]], n_docs: int
) -> tuple[list[dict[str, Any]], list[int]]:
    """(rows, document index) of the questions of the first `n_docs` documents, in record order."""
    _, index = document_index(records)
    keep = [j for j, d in enumerate(index) if d < n_docs]
    return [{k: rows[j][k] for k in KEYS if k in rows[j]} for j in keep], [index[j] for j in keep]


def swap_documents(rows: list[dict[str, Any]], doc_index: list[int]) -> list[dict[str, Any]]:
    """`rows` with each question's document (ctx) replaced by the next document's, cyclically."""
    n = max(doc_index) + 1
    if n < 2:
        raise ValueError("the other-document control needs at least two documents")
    ctx: dict[int, dict[str, Any]] = {}
    for row, d in zip(rows, doc_index, strict=True):
        ctx.setdefault(d, {k: row[k] for k in ("ctx_ids", "ctx_chunks") if k in row})
    return [{**row, **ctx[(d + 1) % n]} for row, d in zip(rows, doc_index, strict=True)]


def monitor_datasets(
    splits: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], n_docs: int
) -> dict[str, ListDataset]:
    """`{split: (featurized rows, records)}` -> the eval datasets `<split>` (own document) and `<split>_other`."""
    out: dict[str, ListDataset] = {}
    for name, (rows, records) in splits.items():
        own, index = _first_docs(rows, records, n_docs)
        out[name] = ListDataset(own)
        out[f"{name}_other"] = ListDataset(swap_documents(own, index))
    return out


def gaps(metrics: dict[str, float], prefix: str = "eval") -> dict[str, float]:
    """`<prefix>_<split>_gap` = other-document CE minus own-document CE, for the splits `metrics` has both of."""
    out = {}
    for split in SPLITS:
        own, other = metrics.get(f"{prefix}_{split}_loss"), metrics.get(f"{prefix}_{split}_other_loss")
        if own is not None and other is not None:
            out[f"{prefix}_{split}_gap"] = other - own
    return out
