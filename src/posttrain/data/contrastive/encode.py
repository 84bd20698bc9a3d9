"""Tokenize triplets with the chat template and pad them with ONE rule shared by the dataset and the collator.

Padding rule (`pad_rows`): right padding — pad id for `input_ids`, -100 for `labels`, 0 for `attention_mask` and
`pool_mask`. Right padding keeps every real token at the position it has unpadded (position ids 0..n-1 under a
causal mask), so neither the LM loss nor the pooled representation depends on how much padding a row gets.
The dataset may pre-pad to `max_length` (static shapes); the collator pads the 3×B rows of a batch to the
longest with the same function, so a pre-padded row passes through unchanged.

Batch layout (what the model sees in its single forward): rows [0, B) benign, [B, 2B) counterfactual,
[2B, 3B) injected, example k at row k of each block; with the invariance objective a fourth block [3B, 4B) holds
the executed rows (the injected instruction as the trusted request, `schema.ALL_ROLES`).

Pooling (`pool_mask`): `last` marks the last prompt token only (the position whose state generates the first answer
token), `prompt` every prompt token, `all` every token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from posttrain.data.chat import IGNORE_INDEX, assistant_labels, check_labels
from posttrain.data.contrastive.schema import ROLES
from posttrain.data.contrastive.secalign import CHAT_TO_ASSISTANT, CHAT_TO_USER
from posttrain.errors import DataError

FIELDS = ("input_ids", "attention_mask", "labels", "pool_mask")
LAYOUTS = ("one_turn", "input_role")  # how the request and the data are laid out in the prompt (`prompt_messages`)
DATA_ROLE = "input"
POOLS = ("last", "prompt", "all")


def chat_turns(tokenizer: Any) -> tuple[str, str]:
    """The text of the tokenizer's chat template between a user message and the assistant's reply, and between that
    reply and the next user message (ChatML: `<|im_end|>` newline `<|im_start|>assistant` newline, and the same with
    `user`)."""
    marks = ("\u241fuser\u241f", "\u241fassistant\u241f", "\u241fnext\u241f")
    text = tokenizer.apply_chat_template(
        [{"role": r, "content": m} for r, m in zip(("user", "assistant", "user"), marks, strict=True)], tokenize=False
    )
    at = [text.find(m) for m in marks]
    if min(at) < 0 or at != sorted(at):
        raise DataError("the chat template does not render user / assistant / user turns in order: no `chat` attack")
    return text[at[0] + len(marks[0]) : at[1]], text[at[1] + len(marks[1]) : at[2]]


def user_message(request: str, data: str, tokenizer: Any = None) -> dict[str, str]:
    """The one user turn of a (request, data) prompt (`layout=one_turn`)."""
    return prompt_messages(request, data, tokenizer)[0]


def prompt_messages(request: str, data: str, tokenizer: Any = None, layout: str = "one_turn") -> list[dict[str, str]]:
    """The prompt turns of (request, data), by `layout` (`LAYOUTS`): `one_turn`, one user turn "request / --- /
    data"; `input_role`, the request as the user turn and the data in a turn of its own with role `input` (SecAlign's
    layout: the untrusted text apart from the trusted request, where the chat template renders such a role). Data
    holding the `chat` attack's turn marks (`secalign.CHAT_TO_ASSISTANT` / `CHAT_TO_USER`) gets them written in
    `tokenizer`'s own chat-template text."""
    if CHAT_TO_ASSISTANT in data or CHAT_TO_USER in data:
        if tokenizer is None:
            raise DataError("a `chat`-family injection needs the tokenizer to render its chat-template turns")
        to_assistant, to_user = chat_turns(tokenizer)
        data = data.replace(CHAT_TO_ASSISTANT, to_assistant).replace(CHAT_TO_USER, to_user)
    if layout == "one_turn":
        return [{"role": "user", "content": f"{request}\n---\n{data}"}]
    if layout == "input_role":
        return [{"role": "user", "content": request}, {"role": DATA_ROLE, "content": data}]
    raise DataError(f"data.params.layout={layout!r} is not one of {', '.join(LAYOUTS)}")


def check_layout(tokenizer: Any, layout: str) -> None:
    """DataError unless `tokenizer`'s chat template renders `layout`'s turns (the `input` role's name and text)."""
    if layout == "one_turn":
        return
    mark = "\u241fdata\u241f"
    text = tokenizer.apply_chat_template(prompt_messages("Q", mark, layout=layout), tokenize=False)
    if mark not in text or DATA_ROLE not in text.replace(mark, ""):
        raise DataError(f"the chat template does not render a turn of role {DATA_ROLE!r}: data.params.layout={layout}")


def target_of(row: dict[str, Any], role: str, injected_target: str = "answer") -> str:
    """Expected assistant reply: the benign answer, also under injection (`injected_target=witness` builds the
    deliberately vulnerable model that follows injections, used as the 'before' of the experiment); the executed
    row's is the answer to the injected instruction."""
    if role == "executed" or (role == "injected" and injected_target == "witness"):
        return row["injected_answer"]
    return row["answer"]


def encode_member(
    tokenizer: Any,
    request: str,
    data: str,
    answer: str,
    max_length: int,
    pool: str = "prompt",
    layout: str = "one_turn",
):
    """input_ids / attention_mask / labels (assistant tokens only) / pool_mask (`POOLS`: the last prompt token,
    every prompt token, or every token)."""
    turns = prompt_messages(request, data, tokenizer, layout)
    enc = assistant_labels(tokenizer, [*turns, {"role": "assistant", "content": answer}])
    n = len(enc["input_ids"])
    if n > max_length:
        raise DataError(f"a triplet member is {n} tokens, longer than algo.max_length={max_length}")
    check_labels(torch.tensor(enc["labels"]), where="contrastive triplet")
    prompt = [int(lab == IGNORE_INDEX) for lab in enc["labels"]]
    if pool == "last":  # the token before the first answer token: its state generates the answer
        first_answer = prompt.index(0)
        pool_mask = [int(t == first_answer - 1) for t in range(n)]
    elif pool == "prompt":
        pool_mask = prompt
    elif pool == "all":
        pool_mask = [1] * n
    else:
        raise ValueError(f"pool={pool!r} is not one of {', '.join(POOLS)}")
    return {**enc, "pool_mask": pool_mask}


def pad_rows(
    rows: Sequence[dict[str, Sequence[int]]], pad_id: int, length: int | None = None
) -> dict[str, torch.Tensor]:
    """Right-pad `rows` (dicts of int lists with FIELDS) to `length` (default: the longest) into tensors."""
    longest = max(len(r["input_ids"]) for r in rows)
    length = longest if length is None else length
    if longest > length:
        raise DataError(f"row of {longest} tokens does not fit the padded length {length}")
    fill = {"input_ids": pad_id, "labels": IGNORE_INDEX, "attention_mask": 0, "pool_mask": 0}
    out = {}
    for key in FIELDS:
        out[key] = torch.tensor([list(r[key]) + [fill[key]] * (length - len(r[key])) for r in rows], dtype=torch.long)
    return out


class TripletDataset(Dataset):
    """Tokenized triplets: item = {role: {FIELDS...}} for each of `roles` (benign / counterfactual / injected, and
    executed for the invariance objective)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        tokenizer: Any,
        max_length: int,
        pool: str = "last",
        injected_target: str = "answer",
        pad_to_max_length: bool = False,
        roles: Sequence[str] = ROLES,
        layout: str = "one_turn",
    ):
        if injected_target not in ("answer", "witness"):
            raise DataError(f"data.params.injected_target={injected_target!r} is not one of answer, witness")
        check_layout(tokenizer, layout)
        pad_id = tokenizer.pad_token_id
        self.rows, self.roles = rows, tuple(roles)
        self.items = []
        for row in rows:
            item = {}
            for role in self.roles:
                m = row[role]
                answer = target_of(row, role, injected_target)
                enc = encode_member(tokenizer, m["request"], m["data"], answer, max_length, pool, layout)
                if pad_to_max_length:  # the collator's rule, applied early
                    enc = {k: v[0].tolist() for k, v in pad_rows([enc], pad_id, max_length).items()}
                item[role] = enc
            self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


class TripletCollator:
    """B items -> one batch of one block per role (benign, counterfactual, injected[, executed]), right-padded."""

    def __init__(self, pad_id: int, pad_to_multiple_of: int | None = None, roles: Sequence[str] = ROLES):
        self.pad_id = pad_id
        self.multiple = pad_to_multiple_of
        self.roles = tuple(roles)

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [item[role] for role in self.roles for item in items]
        length = max(len(r["input_ids"]) for r in rows)
        if self.multiple:
            length = -(-length // self.multiple) * self.multiple
        return pad_rows(rows, self.pad_id, length)
