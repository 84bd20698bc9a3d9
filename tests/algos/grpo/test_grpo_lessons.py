"""DESIGN.md's GRPO lessons on the real trainer path: group advantages, prompt padding, fp32 log-probs."""

from __future__ import annotations

import pytest
import torch

from tests.algos.grpo.helpers import first_batch, make_trainer, perturb_lora


def _groups(prompt_ids: torch.Tensor) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(prompt_ids.tolist()):
        groups.setdefault(tuple(row), []).append(i)
    return groups


def test_advantages_are_centred_per_group_not_per_batch(tmp_path):
    trainer = make_trainer(tmp_path)
    inputs = first_batch(trainer)
    adv = inputs["advantages"]
    groups = _groups(inputs["prompt_ids"])
    assert len(groups) == 2 and all(len(ix) == 4 for ix in groups.values())
    assert adv.abs().max() > 0.1
    for ix in groups.values():
        assert abs(float(adv[ix].sum())) < 1e-4
    # every prompt carries a different reward offset, so centring over the whole batch instead of per group
    # would leave a non-zero sum in each group


def _loss_and_kl(trainer, inputs, pad: int):
    pid, pmask = inputs["prompt_ids"], inputs["prompt_mask"]
    if pad:
        pad_id = trainer.processing_class.pad_token_id
        pid = torch.cat([torch.full((pid.size(0), pad), pad_id), pid], dim=1)
        pmask = torch.cat([torch.zeros(pid.size(0), pad, dtype=pmask.dtype), pmask], dim=1)
    inputs = {**inputs, "prompt_ids": pid, "prompt_mask": pmask}
    ids = torch.cat([pid, inputs["completion_ids"]], dim=1)
    mask = torch.cat([pmask, inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].size(1)
    with torch.no_grad(), trainer.model.disable_adapter():
        ref, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, t)
    inputs["ref_per_token_logps"] = ref
    inputs["old_per_token_logps"] = None
    loss = trainer._compute_loss(trainer.model, inputs)
    return float(loss), float(trainer._metrics["train"]["kl"][-1])


@pytest.mark.parametrize("kernels", ["trl", "eager"])
def test_prompt_padding_changes_neither_loss_nor_kl(tmp_path, kernels):
    if kernels != "trl":
        from posttrain.kernels import available

        ok, why = available(kernels)
        if not ok:
            pytest.skip(why)
    trainer = make_trainer(tmp_path, "algo.trl.beta=0.1", f"kernels={kernels}")
    inputs = first_batch(trainer)
    perturb_lora(trainer.model)
    loss0, kl0 = _loss_and_kl(trainer, inputs, pad=0)
    loss5, kl5 = _loss_and_kl(trainer, inputs, pad=5)
    assert kl0 > 1e-4  # the reference differs from the policy, so the check has teeth
    assert loss5 == pytest.approx(loss0, rel=1e-4, abs=1e-6)
    assert kl5 == pytest.approx(kl0, rel=1e-4, abs=1e-7)


def test_logprobs_are_fp32_for_a_bf16_model(tmp_path):
    trainer = make_trainer(tmp_path, "hw.precision=bf16", "algo.trl.beta=0.1")
    assert trainer.args.cast_lm_head_to_fp32
    model = trainer.model
    assert next(p for n, p in model.named_parameters() if "q_proj.base_layer" in n).dtype == torch.bfloat16
    inputs = first_batch(trainer)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].size(1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, t)
        assert logps.dtype == torch.float32
        assert inputs["ref_per_token_logps"].dtype == torch.float32
        lm = model.get_base_model()
        hidden = lm.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -t - 1 : -1]
        ref = torch.log_softmax(hidden.double() @ lm.lm_head.weight.double().T, -1)
        ref = ref.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    m = inputs["completion_mask"].bool()
    assert (logps[m].double() - ref[m]).abs().max() < 1e-3


def one_member_rewarded(prompts, completions, **kwargs):
    """Groups are contiguous (K=4): the first member of each group scores 1, the others 0."""
    return [1.0 if i % 4 == 0 else 0.0 for i in range(len(completions))]


def _sequence_logps(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, inputs["completion_ids"].size(1)
        )
    return logps, (logps * inputs["completion_mask"]).sum(1)


@pytest.mark.parametrize("kernels", ["trl", "fused"])
def test_loss_falls_when_one_members_reward_rises(tmp_path, kernels):
    """One member of each group gets a higher reward than its siblings: after one gradient step the GRPO loss
    (re-scored against the pre-step policy) is lower and that member became more likely, its siblings less."""
    trainer = make_trainer(tmp_path, "algo.trl.beta=0.0", f"kernels={kernels}", reward=one_member_rewarded)
    inputs = first_batch(trainer)
    raised = inputs["advantages"] > 0
    assert int(raised.sum()) == 2 and bool((inputs["advantages"][~raised] < 0).all())  # one per group
    logps0, seq0 = _sequence_logps(trainer, inputs)
    loss0 = trainer._compute_loss(trainer.model, inputs)
    loss0.backward()
    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.grad is not None:
                p -= 0.5 * p.grad
    loss1 = trainer._compute_loss(trainer.model, {**inputs, "old_per_token_logps": logps0})
    _, seq1 = _sequence_logps(trainer, inputs)
    assert loss1.item() < loss0.item() - 1e-3, (loss0.item(), loss1.item())
    assert bool(((seq1 - seq0)[raised] > 0).all()) and float((seq1 - seq0)[~raised].mean()) < 0


@pytest.mark.parametrize("kernels", ["trl", "eager", "fused"])
def test_lora_kl_is_exactly_zero_at_step_one(tmp_path, kernels):
    """LoRA B starts at zero: the policy is the reference, so the first step's KL is 0.0, not merely small, and so
    is the KL term's gradient (the reference and the policy are scored by the same kernel)."""
    trainer = make_trainer(tmp_path, "algo.trl.beta=0.04", f"kernels={kernels}")
    inputs = first_batch(trainer)  # the first step's batch, reference log-probs from the adapter-free model
    assert inputs["ref_per_token_logps"] is not None
    trainer._compute_loss(trainer.model, inputs)
    metrics = trainer._metrics["train"]
    assert metrics["kl"][-1] == 0.0 and metrics["kl_p95"][-1] == 0.0
    kl_only = {**inputs, "advantages": torch.zeros_like(inputs["advantages"])}
    trainer.model.zero_grad(set_to_none=True)
    trainer._compute_loss(trainer.model, kl_only).backward()
    grads = [p.grad for p in trainer.model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and max(float(g.abs().max()) for g in grads) == 0.0
