"""The rollout batch the generation probes time: the make-train shape, 2 prompts x 4 completions (left-padded)."""

from typing import Any


def make_train_batch(tok: Any) -> Any:
    """Tokenized chat prompts of two addition problems, each repeated for its 4 completions."""
    tok.padding_side = "left"
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": f"What is {a} + {b}?"}], tokenize=False, add_generation_prompt=True
        )
        for a, b in [(12, 34), (56, 7)]
        for _ in range(4)
    ]
    return tok(prompts, return_tensors="pt", padding=True)
