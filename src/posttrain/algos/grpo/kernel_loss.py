"""GRPO's loss through `posttrain.kernels.grpo_loss` (`kernels != trl`), as a mixin before `GRPOTrainer` in a
trainer's bases (`KernelLossMixin`).

`_kernel_loss` runs the backbone and the kernel inside the wrapped model's forward (TRL's `_ForwardRedirection`),
so DDP, FSDP and DeepSpeed treat it like TRL's own forward, and computes TRL's loss term for term (KL bias
correction, vLLM or rollout-copy importance sampling, MoE router aux loss, accumulation scaling) with TRL's metrics.
The old and reference passes (`_get_per_token_logps_and_entropies`) use the same backbone call and log-prob kernel,
so an unchanged policy has a ratio of exactly 1. The trainer supplies `kernel_backend`, `kl_estimator`,
`_forward_redirection` and `_record_kl` / `_record_sampler_mismatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import DistributedType
from torch.distributed.tensor import DTensor

from posttrain.algos.grpo.entropy_control import applied_entropy_coef, update_entropy_control
from posttrain.algos.grpo.policy_forward import causal_lm, global_masked_mean, router_aux_loss
from posttrain.kernels import completion_logps, grpo_loss, kl_per_token, lm_head_gathered
from posttrain.kernels.registry import LOSS_TYPE_PARAMS
from posttrain.models.shared_prompt import shared_prompt_hidden

if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    from trl import GRPOConfig
    from trl import GRPOTrainer as _GRPOBase
else:
    _GRPOBase = object

# GRPOConfig loss knobs the kernel path reads from `self.args` under TRL's names (the others are trainer attributes)


class KernelLossMixin(_GRPOBase):
    """The kernel path of `PosttrainGRPOTrainer`."""

    args: GRPOConfig
    kernel_backend: str
    kl_estimator: str
    _forward_redirection: Any  # TRL's `_ForwardRedirection`
    _record_kl: Callable[[str, torch.Tensor | None, torch.Tensor], None]
    _record_sampler_mismatch: Callable[[dict[str, Any], torch.Tensor], None]

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
        if (
            getattr(self, "kernel_backend", "trl") in ("trl", "liger")
            or compute_entropy
            or compute_aux_loss
            or any(v is not None for v in extra.values())
        ):
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
            if getattr(self, "_capture_policy_logps", False):  # TRL's policy pass in `_compute_loss`: for kl_p95
                self._policy_logps = out[0].detach()
            return out
        # The kernel path's old and reference passes use the policy forward's backbone call and log-prob kernel, so
        # an unchanged policy has ratio exactly 1, and a LoRA policy still at its reference exactly zero KL and KL
        # gradient (not rounding noise between two kernels). Through the wrapper's forward, like the policy's.
        unwrapped = self.accelerator.unwrap_model(model)
        logps = self._forward_redirection(
            model,
            unwrapped,
            self._score_completions,
            unwrapped,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size or input_ids.size(0),
        )
        return logps, None, None

    def _score_completions(self, unwrapped, input_ids, attention_mask, t: int, batch_size: int) -> torch.Tensor:
        lm = causal_lm(unwrapped)
        weight = lm.get_output_embeddings().weight
        if isinstance(weight, DTensor):
            weight = weight.full_tensor()
        out = []
        for s in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[s : s + batch_size], attention_mask[s : s + batch_size]
            rows = {
                "prompt_ids": ids[:, :-t],
                "prompt_mask": mask[:, :-t],
                "completion_ids": ids[:, -t:],
                "completion_mask": mask[:, -t:],
            }
            hidden, _ = self._completion_hidden(lm, rows, aux=False)
            with lm_head_gathered(weight):
                out.append(
                    completion_logps(
                        hidden.to(weight.device),
                        weight,
                        rows["completion_ids"],
                        rows["completion_mask"],
                        backend=self.kernel_backend,
                        temperature=self.temperature,
                    )
                )
        return torch.cat(out)

    def _kernel_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        # Through the wrapper's forward (as TRL's distillation trainer does): DDP then all-reduces the gradients,
        # FSDP and DeepSpeed gather what they shard. Collectives for the metrics run after it, outside.
        mask = inputs["completion_mask"]
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        # TRL's normaliser of the window_tokens loss types (dapo, cispo, vespo): the whole accumulation window's tokens
        window = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            window = window * accum / self.args.steps_per_generation
        unwrapped = self.accelerator.unwrap_model(model)
        loss, stats, kl, aux_loss, entropy, logps = self._forward_redirection(
            model, unwrapped, self._kernel_forward, unwrapped, inputs, window, accum
        )
        self._record_sampler_mismatch(inputs, logps.detach())
        if entropy is not None:  # TRL's `entropy` metric, from the kernel's own pass
            self._metrics[mode]["entropy"].append(global_masked_mean(self.accelerator, entropy, mask))
        update_entropy_control(self, mode, stats)
        if aux_loss is not None:  # TRL: the router loss is scaled for accumulation like the policy loss
            loss = loss + self.router_aux_loss_coef * aux_loss / accum
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss.detach()).mean())
        self._record_kl(mode, kl, mask)
        # TRL's ratio metrics: means over every process's tokens (over sequences at sequence level; vespo's weight
        # is one per sequence). Every metric stays a device tensor until `log()` (`device_metrics`).
        tokens = mask.sum() if self.importance_sampling_level == "token" else torch.tensor(float(mask.size(0)))
        names = {
            "clip_ratio": "clip_ratio/region_mean",
            "clip_ratio/low_mean": "clip_ratio/low_mean",
            "clip_ratio/high_mean": "clip_ratio/high_mean",
            "cispo_clip_ratio": "cispo_clip_ratio",
            "vespo/phi_seq_mean": "vespo/phi_seq_mean",
        }
        for key, name in names.items():
            if key in stats:
                count = torch.tensor(float(mask.size(0))) if key.startswith("vespo") else tokens
                one = torch.ones((), device=mask.device)
                local = torch.stack([stats.tensor(key).float(), one]) * count.to(mask.device, torch.float32)
                totals = self.accelerator.reduce(local, reduction="sum")
                self._metrics[mode][name].append(totals[0] / totals[1].clamp(min=1.0))
        return loss

    def _completion_hidden(
        self, lm, inputs: dict[str, Any], aux: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Final-norm hidden states [B, T, H] at the positions predicting the completion, and the router aux loss
        (None unless asked and TRL enabled it: an MoE config with `router_aux_loss_coef != 0`)."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        aux = aux and self.aux_loss_enabled
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

    def _kernel_forward(self, unwrapped, inputs: dict[str, Any], window: torch.Tensor, accum: float):
        """Backbone, then `posttrain.kernels.grpo_loss` on the completion positions; runs as the model's forward.
        `window`, `accum`: TRL's normalisers for this micro-batch (`policy_loss_from_logps`)."""
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        lm = causal_lm(unwrapped)
        hidden, aux_loss = self._completion_hidden(lm, inputs)
        weight = lm.get_output_embeddings().weight
        if isinstance(weight, DTensor):  # FSDP2 outside its unsharded forward: the full head, as TRL does
            weight = weight.full_tensor()
        old, ref = inputs.get("old_per_token_logps"), inputs.get("ref_per_token_logps")
        # TRL's correction of vLLM's sampling, or posttrain's of a rollout copy's (`sampler_mismatch.add_correction`)
        vllm_is = inputs.get("importance_sampling_ratio")
        with lm_head_gathered(weight):  # ZeRO-3: the head is read directly, so gather it (TRL's helper)
            loss, stats, logps, entropy = grpo_loss(
                hidden.to(weight.device),
                weight,
                completion_ids,
                mask,
                inputs["advantages"],
                old_logps=old,
                ref_logps=ref,
                backend=self.kernel_backend,
                beta=self.beta,
                epsilon_low=self.epsilon_low,
                epsilon_high=self.epsilon_high,
                loss_type=self.loss_type,
                kl_estimator=self.kl_estimator,
                importance_sampling_level=self.importance_sampling_level,
                temperature=self.temperature,
                max_completion_length=self.max_completion_length,
                kl_bias_correction=self.args.use_bias_correction_kl,
                vllm_is_ratio=vllm_is,
                off_policy_mask_threshold=self.off_policy_mask_threshold,
                sampling_logps=inputs.get("sampling_per_token_logps"),
                top_entropy_quantile=self.top_entropy_quantile,
                entropy_coef=applied_entropy_coef(self),
                entropy_mask_fn=self.get_high_entropy_mask,  # TRL's: the quantile over every process
                window_tokens=window,
                accumulation_steps=accum,
                return_logps=True,
                return_entropy=True,
                **{k: getattr(self.args, k) for k in LOSS_TYPE_PARAMS},
            )
        kl = None
        if ref is not None and self.beta != 0.0:
            kl = kl_per_token(
                logps,
                ref,
                mask,
                old,
                kl_estimator=self.kl_estimator,
                kl_bias_correction=self.args.use_bias_correction_kl,
                importance_sampling_level=self.importance_sampling_level,
            )
        return loss, stats, kl, aux_loss, entropy, logps
