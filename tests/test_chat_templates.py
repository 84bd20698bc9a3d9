"""Assistant masks from {% generation %} tags cover exactly what the assistant writes; all-masked labels fail."""

from __future__ import annotations

import pytest
import torch

from posttrain.data.chat import IGNORE_INDEX, assistant_labels, check_labels
from posttrain.errors import DataError
from posttrain.models.tokenizer import build_byte_tokenizer

CONV = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "It is 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6"},
]


# SmolLM2-135M-Instruct's own template (from its GGUF): no {% generation %} tags, so no assistant masks.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _chatml_tokenizer():
    tok = build_byte_tokenizer("llama", "chatml.jinja")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    return tok


@pytest.mark.parametrize(
    "family, template, expected",
    [
        ("llama", "llama3.jinja", ["It is 4.<|eot_id|>", "6<|eot_id|>"]),
        (
            "gpt_oss",
            "gpt_oss.jinja",
            ["<|channel|>final<|message|>It is 4.<|end|>", "<|channel|>final<|message|>6<|return|>"],
        ),
        ("chatml", "chatml.jinja", ["It is 4.<|im_end|>", "6<|im_end|>"]),
    ],
)
def test_assistant_mask_covers_exactly_assistant_turns(family, template, expected):
    tok = _chatml_tokenizer() if family == "chatml" else build_byte_tokenizer(family, template)
    out = assistant_labels(tok, CONV)
    spans, cur = [], []
    for t, lab in zip(out["input_ids"], out["labels"]):
        if lab != IGNORE_INDEX:
            cur.append(t)
        elif cur:
            spans.append(tok.decode(cur)), cur.clear()
    if cur:
        spans.append(tok.decode(cur))
    assert spans == expected
    assert "What is" not in "".join(spans) and "Be brief" not in "".join(spans)


def test_all_masked_labels_raise_clear_error():
    tok = build_byte_tokenizer("llama", "llama3.jinja")
    out = assistant_labels(tok, CONV[:2])  # no assistant turn
    labels = torch.tensor([out["labels"]])
    with pytest.raises(DataError, match="every label is masked"):
        check_labels(labels)
    check_labels(torch.tensor([assistant_labels(tok, CONV)["labels"]]))  # fine when there is an answer


@pytest.mark.parametrize("conv", [CONV, CONV[1:], CONV[1:2], [{"role": "user", "content": " spaced  "}]])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_chatml_renders_like_smollm2_own_template(conv, add_generation_prompt):
    """Same text as SmolLM2's template (default system message included), so the model sees what it was tuned on."""
    ours, theirs = _chatml_tokenizer(), _chatml_tokenizer()
    theirs.chat_template = SMOLLM2_TEMPLATE
    kw = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    assert ours.apply_chat_template(conv, **kw) == theirs.apply_chat_template(conv, **kw)
    with pytest.raises(DataError, match=r"no \{% generation %\} tags"):  # why the repo has its own: no masks there
        assistant_labels(theirs, CONV)
