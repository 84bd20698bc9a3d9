"""TRL `GRPOTrainer` with the few things posttrain changes, each small and documented:

1. `_compute_loss` routes the policy loss through `posttrain.kernels.grpo_loss` when `kernels != trl` (TRL's own
   Liger path is never enabled at the same time: `use_liger_kernel` stays False, since TRL would then bypass an
   overridden loss).
2. Adaptive beta (`algo.kl.target`): after each optimizer step beta follows the measured KL.
3. Guards: a non-finite loss stops training with the step number; checkpoints are written atomically.
4. Logging: reward histograms by constraint type (`reward_hist/<type>/<bin>` counts in metrics.jsonl, wandb
   histograms), beta each step; TRL already logs per-reward means, completion lengths, clip ratios and the
   fraction of zero-std groups.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from trl import GRPOTrainer

from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.reward_hist import RewardHistogram
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.errors import TrainingError
from posttrain.guards import check_finite_loss


class PosttrainGRPOTrainer(AtomicCheckpointMixin, GRPOTrainer):
    def __init__(self, *args, kernel_backend: str = "trl", kl_estimator: str = "k3",
                 kl_controller: AdaptiveBeta | None = None, reward_hist_default: str = "all", **kwargs):
        super().__init__(*args, **kwargs)
        self.kernel_backend = kernel_backend
        self.kl_estimator = kl_estimator
        self.kl_controller = kl_controller
        self.reward_hist = RewardHistogram(default_type=reward_hist_default)

    # -- loss -------------------------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        if self.kernel_backend == "trl":
            loss = super()._compute_loss(model, inputs)
        else:
            loss = self._kernel_loss(model, inputs)
        check_finite_loss(loss, self.state.global_step + 1)
        return loss

    def _causal_lm(self, model):
        model = self.accelerator.unwrap_model(model)
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    def _kernel_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        from posttrain.kernels import grpo_loss

        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], mask], dim=1)
        lm = self._causal_lm(model)
        backbone = getattr(lm, lm.base_model_prefix)
        with self.accelerator.autocast():
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        # position t predicts token t+1: the states that score the completion end one before the sequence does
        t = completion_ids.size(1)
        hidden = hidden[:, -t - 1 : -1]
        loss, stats = grpo_loss(
            hidden,
            lm.get_output_embeddings().weight,
            completion_ids,
            mask,
            inputs["advantages"],
            old_logps=inputs.get("old_per_token_logps"),
            ref_logps=inputs.get("ref_per_token_logps"),
            backend=self.kernel_backend,
            beta=self.beta,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            loss_type=self.loss_type,
            kl_estimator=self.kl_estimator,
            importance_sampling_level=self.importance_sampling_level,
            temperature=self.temperature,
            max_completion_length=self.max_completion_length,
        )
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type == "dapo":  # TRL normalises DAPO by the tokens of the whole accumulation window
            window = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                window = window * accum / self.args.steps_per_generation
            loss = loss * mask.sum().clamp(min=1.0) / window
        else:
            loss = loss / accum
        for key in ("kl_mean", "kl_p95", "clip_ratio"):
            if key in stats:
                value = stats[key]
                self._metrics[mode][key if key != "kl_mean" else "kl"].append(float(value))
        return loss

    def _generate_and_score_completions(self, inputs):
        try:
            return super()._generate_and_score_completions(inputs)
        except RuntimeError as ex:
            # NaN/inf weights or overflowing logits (a diverged update) break sampling before any loss: say so
            step = self.state.global_step + 1
            _check_finite_weights(self.model, step)
            if "inf" in str(ex) and "nan" in str(ex):
                raise TrainingError(
                    f"non-finite logits while sampling at step {step}: the policy diverged at step {step - 1} "
                    "(lower trainer.lr?)"
                ) from ex
            raise

    # -- rewards, adaptive beta, logging ----------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        # rewards are gathered across processes: pair each with its own row only on a single process
        if total.numel() == len(inputs):
            self.reward_hist.add(inputs, total.tolist())
        return rewards_per_func

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training and "loss" in logs:
            logs["beta"] = self.beta
            if self.kl_controller is not None:
                kls = self._metrics["train"].get("kl", [])
                kl = sum(kls) / len(kls) if kls else math.nan
                self.beta = self.kl_controller.update(kl, n_steps=self.args.logging_steps)
            wandb_run = None
            if self.args.report_to and "wandb" in self.args.report_to:
                import wandb

                wandb_run = wandb.run
            logs.update(self.reward_hist.flush(wandb_run))
        super().log(logs, start_time)


def _check_finite_weights(model: torch.nn.Module, step: int) -> None:
    for name, param in model.named_parameters():
        if param.requires_grad and not bool(torch.isfinite(param.detach()).all()):
            raise TrainingError(
                f"non-finite weights ({name}) at step {step}: training diverged at step {step - 1} (lower trainer.lr?)"
            )
