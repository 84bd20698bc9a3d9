"""DAPO's dynamic sampling: a group whose completions all got the same reward has zero advantages and teaches nothing;
drop such groups and generate more until the generation batch is full again (`DynamicSamplingMixin`, before
`GRPOTrainer` in a trainer's bases; `dynamic_sampling_rounds` > 0 turns it on and caps the extra generation batches
per step, `dynamic_sampling_refill_groups` sets how many prompts each extra batch samples: DAPO's gen_prompt_bsz).

A group is informative when any member's advantage is non-zero (with every reward scaling a group of equal rewards
has exactly zero advantages). The merged batch takes informative groups in generation order up to the batch's group
count; when the cap on extra rounds is reached first, it is filled with dropped groups (zero advantages: no policy
gradient, the KL term still counts), so the batch keeps its shape. Batches are padded to a common width: prompts on
the left, completions and every per-token tensor on the right.
"""

from __future__ import annotations

from typing import Any

import torch

_PROMPT_KEYS = ("prompt_ids", "prompt_mask")  # left-padded; every other [B, T] tensor is per completion token


def informative_groups(advantages: torch.Tensor, num_generations: int) -> torch.Tensor:
    """[groups] bool: the groups (consecutive rows of `num_generations`) with any non-zero advantage."""
    return (advantages.reshape(-1, num_generations) != 0).any(dim=1)


def _pad(t: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    missing = width - t.size(1)
    if missing <= 0:
        return t
    fill = t.new_full((t.size(0), missing, *t.shape[2:]), value)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def _rows(groups: torch.Tensor, k: int) -> torch.Tensor:
    """Row indices of `groups` (group indices) in a batch of groups of `k` rows."""
    return (groups.unsqueeze(1) * k + torch.arange(k, device=groups.device)).reshape(-1)


def merge_groups(
    batches: list[dict[str, Any]], keeps: list[torch.Tensor], n_groups: int, k: int, pad_token_id: int
) -> tuple[dict[str, Any], int]:
    """(one scored batch of `n_groups` groups, how many of them are informative): the informative groups of
    `batches` in order, then dropped ones to fill."""
    picked: list[tuple[int, int]] = []  # (batch index, group index)
    for informative in (True, False):
        for b, keep in enumerate(keeps):
            for g in torch.nonzero(keep == informative).flatten().tolist():
                if len(picked) < n_groups:
                    picked.append((b, g))
    informative_count = sum(bool(keeps[b][g]) for b, g in picked)
    tensor_keys = [key for key, value in batches[0].items() if torch.is_tensor(value) and value.dim() >= 1]
    widths = {key: max(batch[key].size(1) for batch in batches) for key in tensor_keys if batches[0][key].dim() >= 2}
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in tensor_keys}
    for b, batch in enumerate(batches):
        groups = torch.tensor([g for bb, g in picked if bb == b], dtype=torch.long)
        if not len(groups):
            continue
        rows = _rows(groups, k).to(batch["advantages"].device)
        for key in tensor_keys:
            value = batch[key].index_select(0, rows)
            if key in widths:
                pad_value = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
                value = _pad(value, widths[key], pad_value, left=key in _PROMPT_KEYS)
            parts[key].append(value)
    merged = {key: torch.cat(parts[key]) if key in parts else value for key, value in batches[0].items()}  # TRL's order
    loss_mask = merged["completion_mask"] * merged["tool_mask"] if "tool_mask" in merged else merged["completion_mask"]
    merged["num_items_in_batch"] = loss_mask.sum()
    return merged, informative_count


class DynamicSamplingMixin:
    """Wraps `GRPOTrainer._generate_and_score_completions` (training only) with DAPO's dynamic sampling."""

    dynamic_sampling_rounds: int = 0
    dynamic_sampling_refill_groups: int | None = None
    _extra_epochs: int = 0
    train_dataset: Any  # GRPOTrainer's
    args: Any

    def _generate_and_score_completions(self, inputs):
        if not self.dynamic_sampling_rounds or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        k = self.num_generations
        n_groups = len(inputs) // k
        refill = self.dynamic_sampling_refill_groups or n_groups
        rounds = 0
        scored = super()._generate_and_score_completions(inputs)
        batches, keeps = [scored], [informative_groups(scored["advantages"], k)]
        while sum(int(keep.sum()) for keep in keeps) < n_groups and rounds < self.dynamic_sampling_rounds:
            rows = [row for row in self._more_prompts(refill) for _ in range(k)]
            more = super()._generate_and_score_completions(rows)
            batches.append(more)
            keeps.append(informative_groups(more["advantages"], k))
            rounds += 1
        merged, informative = merge_groups(batches, keeps, n_groups, k, self._tokenizer.pad_token_id)
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/zero_std_frac"].append(1.0 - keeps[0][:n_groups].float().mean().item())
        metrics["dynamic_sampling/extra_generations"].append(float(rounds * refill * k))
        metrics["dynamic_sampling/informative_frac"].append(informative / n_groups)
        return merged

    def _more_prompts(self, n: int) -> list[dict[str, Any]]:
        """`n` dataset rows for the extra rounds: a seeded shuffle of the training set, cycled."""
        dataset = self.train_dataset
        order = self.__dict__.setdefault("_extra_order", [])
        rows = []
        for _ in range(n):
            if not order:
                g = torch.Generator().manual_seed(self.args.seed + 7919 * (1 + self._extra_epochs))
                order.extend(torch.randperm(len(dataset), generator=g).tolist())
                self._extra_epochs += 1
            rows.append(dataset[order.pop()])
        return rows
