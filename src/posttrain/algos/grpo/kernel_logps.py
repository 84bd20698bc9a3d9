"""Per-token log-probs from a posttrain kernel behind TRL's own seam (`kernels != trl`), as a mixin before
`GRPOTrainer` in a trainer's bases (`KernelLogpsMixin`).

TRL computes every log-prob it needs through `GRPOTrainer._get_per_token_logps_and_entropies`: the no-grad old and
reference passes while scoring, and the policy pass inside `_compute_loss` (with the entropy, and the MoE router
loss when enabled). The mixin answers all of them with the backbone's final hidden states and a
`posttrain.kernels` backend (its own backward, no `[tokens, vocab]` tensor), inside the wrapped model's forward
(TRL's `_ForwardRedirection`) so DDP, FSDP and DeepSpeed treat it like TRL's own forward. TRL's `_compute_loss`
then computes the loss of every loss type, the KL, the importance-sampling corrections, the masks, the entropy
bonus and the metrics: posttrain restates none of it. Because every pass uses the same backbone call and kernel, an
unchanged policy has a ratio of exactly 1 and a LoRA policy at its reference exactly zero KL.

A backend without an entropy pass (`Backend.entropy_function` None) returns NaN entropies: TRL's `entropy` metric is
then left out of the log; the options that need it are refused at config time (`registry.refusal`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import DistributedType
from torch.distributed.tensor import DTensor

from posttrain.algos.grpo.policy_forward import causal_lm, router_aux_loss
from posttrain.kernels import completion_logps, lm_head_gathered
from posttrain.kernels.loss import completion_logps_entropy
from posttrain.kernels.registry import BACKENDS, TRL
from posttrain.models.shared_prompt import shared_prompt_hidden

if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    from trl import GRPOConfig
    from trl import GRPOTrainer as _GRPOBase
else:
    _GRPOBase = object


class KernelLogpsMixin(_GRPOBase):
    """`_get_per_token_logps_and_entropies` through `kernel_backend` (a `posttrain.kernels` backend, or `trl`)."""

    args: GRPOConfig
    kernel_backend: str
    share_prompts: bool
    _forward_redirection: Any  # TRL's `_ForwardRedirection`

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **extra,
    ):
        if getattr(self, "kernel_backend", TRL) == TRL or any(v is not None for v in extra.values()):
            out = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **extra,
            )
        else:
            unwrapped = self.accelerator.unwrap_model(model)
            out = self._forward_redirection(
                model,
                unwrapped,
                self._kernel_logps,
                unwrapped,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size or input_ids.size(0),
                compute_entropy,
                compute_aux_loss,
            )
        if getattr(self, "_capture_policy_logps", False):  # the policy pass of `_compute_loss`, for metrics
            self._policy_logps = out[0]
        return out

    def _kernel_logps(
        self, unwrapped, input_ids, attention_mask, t: int, batch_size: int, entropy: bool, aux: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(log-probs [B, t], entropies [B, t] or None, router aux loss or None) of the last `t` tokens; runs as the
        model's forward."""
        lm = causal_lm(unwrapped)
        weight = lm.get_output_embeddings().weight
        if isinstance(weight, DTensor):  # FSDP2 outside its unsharded forward: the full head, as TRL does
            weight = weight.full_tensor()
        # the entropy bonus differentiates the entropy; the metric and the top-entropy mask only read it
        entropy_grad = entropy and torch.is_grad_enabled() and self._entropy_bonus_enabled
        has_entropy = BACKENDS[self.kernel_backend].entropy_function is not None
        logps, entropies, aux_losses = [], [], []
        for s in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[s : s + batch_size], attention_mask[s : s + batch_size]
            rows = {"prompt_ids": ids[:, :-t], "prompt_mask": mask[:, :-t], "completion_ids": ids[:, -t:]}
            rows["completion_mask"] = mask[:, -t:]
            hidden, aux_loss = self._completion_hidden(lm, rows, aux=aux)
            args = (hidden.to(weight.device), weight, rows["completion_ids"], rows["completion_mask"])
            backend, temperature = self.kernel_backend, self.temperature
            with lm_head_gathered(weight):  # ZeRO-3: the head is read directly, so gather it (TRL's helper)
                if entropy and has_entropy:
                    lp, ent = completion_logps_entropy(
                        *args, backend=backend, temperature=temperature, grad=entropy_grad
                    )
                else:
                    lp = completion_logps(*args, backend=backend, temperature=temperature)
                    ent = torch.full_like(lp, float("nan")) if entropy else None
            logps.append(lp)
            entropies.append(ent)
            aux_losses.append(aux_loss)
        aux_out = torch.stack(aux_losses).mean() if aux else None  # type: ignore[arg-type]  # all set when aux
        return torch.cat(logps), torch.cat(entropies) if entropy else None, aux_out  # type: ignore[arg-type]

    def _completion_hidden(
        self, lm, inputs: dict[str, Any], aux: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Final-norm hidden states [B, T, H] at the positions predicting the completion, and the router aux loss
        (None unless asked)."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        extra = {"output_router_logits": True} if aux else {}
        backbone = getattr(lm, lm.base_model_prefix)
        if not aux and self._shares_prompts():
            with self.accelerator.autocast():
                hidden = shared_prompt_hidden(
                    backbone,
                    inputs["prompt_ids"],
                    inputs["prompt_mask"],
                    inputs["completion_ids"],
                    inputs["completion_mask"],
                )
            if hidden is not None:
                return hidden, None
        with self.accelerator.autocast():  # position ids from the mask: `add_mask_position_ids`
            out = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **extra)
        aux_loss = router_aux_loss(lm, out.router_logits, attention_mask) if aux else None
        # position t predicts token t+1: the states that score the completion end one before the sequence does
        t = inputs["completion_ids"].size(1)
        return out.last_hidden_state[:, -t - 1 : -1], aux_loss

    def _shares_prompts(self) -> bool:
        """Whether `_completion_hidden` runs each distinct prompt once (`shared_prompt`, which says where not)."""
        return (
            getattr(self, "share_prompts", False)
            and not self.args.gradient_checkpointing
            and self.accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED)
        )
