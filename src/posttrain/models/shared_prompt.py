"""One forward per distinct prompt. Every group in a GRPO batch is `num_generations` completions of one prompt, so
a plain forward over `[prompt; completion]` rows, and a plain `generate` over the repeated prompts, run each prompt
`num_generations` times.

- `prefill_distinct_prompts` (rollout engines): the KV cache of every prompt but its last token, computed once per
  distinct prompt and gathered back to one row per completion; `generate` given it runs only the last prompt token
  before decoding. With SmolLM2's 46-token `make train` prompts (8 rows, 16 new tokens, bf16 copy) the prefill was
  a quarter of a rollout's time.
- `shared_prompt_hidden` (GRPO's learner, kernel path) runs the backbone on the distinct prompt rows with a KV cache,
  gathers the cache back to one row per completion (`index_select`, through which gradients flow to the prompt's keys
  and values, so a LoRA on the prompt's projections is trained as before) and runs the completions against it. Same
  outputs and gradients as the plain forward up to rounding; on the `make train` preset (46-token prompts, ~14-token
  completions, groups of 4) it runs 2.3x fewer tokens.

Not used where a second backbone call or a cache in training would change more than the arithmetic: gradient
checkpointing (transformers drops the cache under it), MoE router aux losses (the prompt's tokens would count once,
not once per completion), and FSDP / DeepSpeed, whose parameter gathering is tied to one forward per step.
"""

from __future__ import annotations

import torch


def distinct_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(indices of the first row of each distinct prompt, each row's distinct prompt), or None when no two rows share
    a prompt (then there is nothing to save)."""
    rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    if unique.size(0) == rows.size(0):
        return None
    first = torch.full((unique.size(0),), rows.size(0), dtype=torch.long, device=rows.device)
    first.scatter_reduce_(0, inverse, torch.arange(rows.size(0), device=rows.device), reduce="amin")
    return first, inverse


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask, as generation numbers left-padded rows: `cumsum - 1`, 0 on padding."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


@torch.no_grad()
def prefill_distinct_prompts(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """The KV cache (a transformers `DynamicCache`, one row per input row) of every column of the left-padded
    `input_ids` but the last, each distinct prompt computed once; None when no two rows share a prompt or a prompt
    is a single column. Pass it to `generate(input_ids, attention_mask, past_key_values=...)`."""
    if input_ids.size(1) < 2:
        return None
    found = distinct_rows(input_ids, attention_mask)
    if found is None:
        return None
    first, inverse = found
    ids, mask = input_ids[first, :-1], attention_mask[first, :-1]
    out = model(input_ids=ids, attention_mask=mask, position_ids=mask_positions(mask), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.reorder_cache(inverse)
    return cache


def shared_prompt_hidden(
    backbone: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor | None:
    """Final-norm hidden states [B, T, H] at the positions predicting the T completion tokens (as
    `backbone(cat(prompt, completion)).last_hidden_state[:, -T - 1 : -1]`), computing each distinct prompt once;
    None when every row's prompt is distinct. Positions follow the mask (`cumsum - 1`, as generation's)."""
    found = distinct_rows(prompt_ids, prompt_mask)
    if found is None:
        return None
    first, inverse = found
    ids, prompt_rows_mask = prompt_ids[first], prompt_mask[first]
    prompt_out = backbone(
        input_ids=ids, attention_mask=prompt_rows_mask, position_ids=mask_positions(prompt_rows_mask), use_cache=True
    )
    cache = prompt_out.past_key_values
    cache.reorder_cache(inverse)  # one cached prompt per completion row (differentiable index_select)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    positions = mask_positions(mask)[:, prompt_ids.size(1) :]
    out = backbone(
        input_ids=completion_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    )
    last_prompt = prompt_out.last_hidden_state[inverse, -1:]  # predicts the first completion token
    return torch.cat([last_prompt, out.last_hidden_state[:, :-1]], dim=1)
