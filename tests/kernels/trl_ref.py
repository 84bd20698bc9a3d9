"""TRL's own loss as the oracle: `GRPOTrainer._compute_loss` run on a tiny random LlamaForCausalLM.

`GRPOTrainer.__init__` needs datasets, reward functions and a generation backend, none of which the
loss touches, so the unbound `_compute_loss` runs on a stub carrying exactly the attributes it reads;
the model is patched with TRL's own fused LM head (`add_fused_lm_head`), as the trainer does. Every
`GRPOConfig` option the loss reads has TRL's default unless a test sets it. With `backend`, the stub's
log-prob pass is the trainer's (`KernelLogpsMixin`) on that posttrain kernel: what the trainer runs.
"""

from __future__ import annotations

import types
from collections import defaultdict
from contextlib import nullcontext

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import _ForwardRedirection
from trl.trainer.utils import add_fused_lm_head

from posttrain.algos.grpo.kernel_logps import KernelLogpsMixin


class _Accelerator:
    num_processes = 1
    sync_gradients = True
    is_main_process = True

    def autocast(self):
        return nullcontext()

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def unwrap_model(self, model):
        return model


def tiny_model(vocab: int = 160, hidden: int = 32, seed: int = 0, temperature: float = 1.0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():  # random init has tiny logits; make the softmax non-trivial
        model.lm_head.weight.mul_(40.0)
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    return model


def trl_default(field: str):
    """`GRPOConfig`'s default for `field` (TRL's own value, never restated here)."""
    return GRPOConfig.__dataclass_fields__[field].default


# the GRPOConfig fields `_compute_loss` reads from `self.args`
_ARGS = (
    "use_bias_correction_kl",
    "delta",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "entropy_target",
    "entropy_coef_delta",
    "entropy_coef_min",
    "entropy_coef_max",
)


def trl_loss(
    model,
    inputs: dict,
    *,
    loss_type="grpo",
    beta=0.0,
    epsilon_low=0.2,
    epsilon_high=0.2,
    importance_sampling_level="token",
    max_completion_length=None,
    off_policy_mask_threshold=None,
    top_entropy_quantile=1.0,
    entropy_coef=0.0,
    use_adaptive_entropy=False,
    accumulation_steps=1,
    backend: str | None = None,
    temperature: float = 1.0,
    **args,
):
    """(loss, metrics) from TRL's `GRPOTrainer._compute_loss` (train mode), its log-probs from TRL's fused head
    (`backend` None) or from the trainer's kernel pass on `backend`.

    `args` override the `GRPOConfig` fields the loss reads from `self.args` (`_ARGS`); every other one keeps TRL's
    default (e.g. `use_bias_correction_kl`). `inputs["importance_sampling_ratio"]`, when present, is applied as TRL
    does with vLLM's importance-sampling correction on. `accumulation_steps`: TRL's current accumulation (the
    `window_tokens` types then normalise by `num_items_in_batch * accumulation_steps`, as for one micro-batch of a
    generation batch of that many micro-batches, each like this one: `num_items_in_batch` = its tokens x that).
    """
    unknown = set(args) - set(_ARGS)
    assert not unknown, unknown
    defaults = {f: trl_default(f) for f in _ARGS}
    use_is = inputs.get("importance_sampling_ratio") is not None
    stub = types.SimpleNamespace(
        model=model,
        accelerator=_Accelerator(),
        loss_type=loss_type,
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        importance_sampling_level=importance_sampling_level,
        max_completion_length=max_completion_length or inputs["completion_ids"].shape[1],
        top_entropy_quantile=top_entropy_quantile,
        aux_loss_enabled=False,
        off_policy_mask_threshold=off_policy_mask_threshold,
        use_vllm=use_is,
        vllm_importance_sampling_correction=use_is,
        current_gradient_accumulation_steps=accumulation_steps,
        entropy_coef=entropy_coef,
        use_adaptive_entropy=use_adaptive_entropy,
        _entropy_bonus_enabled=entropy_coef != 0.0 or use_adaptive_entropy,
        _last_world_entropy=float("inf"),
        _entropy_window_stats=None,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=types.SimpleNamespace(**{**defaults, **args}, steps_per_generation=accumulation_steps),
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        kernel_backend=backend,
        temperature=temperature,
        share_prompts=False,
        _forward_redirection=_ForwardRedirection(),
    )
    stub.args.gradient_checkpointing = False
    for method in ("_get_per_token_logps_and_entropies", "get_high_entropy_mask"):
        setattr(stub, method, types.MethodType(getattr(GRPOTrainer, method), stub))
    if backend is not None:  # the kernel pass (the mixin's own methods, on the stub)
        for method in ("_get_per_token_logps_and_entropies", "_kernel_logps", "_completion_hidden", "_shares_prompts"):
            setattr(stub, method, types.MethodType(getattr(KernelLogpsMixin, method), stub))
    model.train()
    inputs = dict(inputs)
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum() * accumulation_steps
    loss = GRPOTrainer._compute_loss(stub, model, inputs)
    return loss, {k: v[-1] for k, v in stub._metrics["train"].items()}


def completion_hidden(model, inputs: dict) -> torch.Tensor:
    """Final-norm hidden states at the positions predicting the completion tokens: [B, T, H]."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    T = inputs["completion_ids"].shape[1]
    out = model.model(input_ids=ids, attention_mask=att, use_cache=False).last_hidden_state
    return out[:, -T - 1 : -1]


def make_inputs(model, B=4, P=5, T=7, seed=1, empty_rows=(1,), off_policy=0.3):
    """Random prompts/completions with ragged masks, some empty rows, and old/ref log-probs near the policy's."""
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    prompt_ids = torch.randint(0, V, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding
    completion_ids = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    completion_mask = (torch.arange(T)[None] < lengths[:, None]).long()
    for r in empty_rows:
        completion_mask[r] = 0
    advantages = torch.randn(B, generator=g)
    inputs = dict(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        advantages=advantages,
    )
    # old/ref near the current policy so ratios straddle the clip range
    with torch.no_grad():
        from posttrain.kernels import completion_logps

        cur = completion_logps(
            completion_hidden(model, inputs), model.lm_head.weight, completion_ids, completion_mask, backend="eager"
        )
    inputs["old_per_token_logps"] = (cur + off_policy * torch.randn(B, T, generator=g)) * completion_mask
    inputs["ref_per_token_logps"] = (cur + 0.5 * torch.randn(B, T, generator=g)) * completion_mask
    return inputs
