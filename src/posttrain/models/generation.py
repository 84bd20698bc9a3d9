"""Batched generation with left padding: the one place every evaluation decodes replies.

    texts, ids = generate(model, tokenizer, [[{"role": "user", "content": "2 + 2?"}]], max_new_tokens=8)

Prompts are conversations (rendered with the tokenizer's chat template and its generation prompt) or plain
strings (used as they are). Greedy unless `do_sample=True` is passed; `num_return_sequences` completions per
prompt come back grouped by prompt. Completion ids end with the first EOS (kept, as in TRL's completion ids);
texts skip special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def render(tokenizer: Any, prompt: str | Sequence[dict]) -> str:
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)


def _trim(ids: list[int], eos: set[int], pad: int | None) -> list[int]:
    """Up to and including the first EOS (as TRL's completion ids), else without the trailing padding."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[: i + 1]
    while ids and ids[-1] == pad:
        ids = ids[:-1]
    return ids


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str | Sequence[dict]],
    *,
    max_new_tokens: int,
    batch_size: int = 16,
    num_return_sequences: int = 1,
    desc: str | None = None,
    **gen_kwargs: Any,
) -> tuple[list[str], list[list[int]]]:
    """(texts, completion ids), `len(prompts) * num_return_sequences` of each, grouped by prompt. With `desc`, a
    progress bar over the prompts (stderr) while there is more than one batch."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    eos_ids = {t for t in (eos if isinstance(eos, list) else [eos]) if t is not None}
    gen_kwargs.setdefault("do_sample", False)
    texts: list[str] = []
    ids: list[list[int]] = []
    bar = tqdm(
        total=len(prompts), desc=desc, unit="prompt", leave=False, disable=desc is None or len(prompts) <= batch_size
    )
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = [render(tokenizer, p) for p in prompts[start : start + batch_size]]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_return_sequences,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
                use_cache=True,
                **gen_kwargs,
            )
            new = [_trim(row.tolist(), eos_ids, tokenizer.pad_token_id) for row in out[:, enc["input_ids"].shape[1] :]]
            ids += new
            texts += tokenizer.batch_decode(new, skip_special_tokens=True)
            bar.update(len(chunk))
    finally:
        bar.close()
        tokenizer.padding_side = side
        model.train(was_training)
    return texts, ids
