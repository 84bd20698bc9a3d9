"""TRL `GRPOTrainer` with the few things posttrain changes, each small and documented:

1. `_compute_loss` routes the policy loss through `posttrain.kernels.grpo_loss` when `kernels != trl` (TRL's own
   Liger path is never enabled at the same time: `use_liger_kernel` stays False, since TRL would then bypass an
   overridden loss).
2. Adaptive beta (`algo.kl.target`): after each optimizer step beta follows that step's KL (`kl_control`); the
   controller's state is in every checkpoint (`trainer_state.json`), so `resume=auto` continues its beta.
3. Guards: a non-finite loss stops training with the step number; checkpoints are written atomically.
4. Logging: reward histograms by constraint type (`reward_hist/<type>/<bin>` counts in metrics.jsonl, wandb
   histograms), beta each step; TRL already logs per-reward means, completion lengths, clip ratios and the
   fraction of zero-std groups.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer

from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.reward_hist import RewardHistogram, constraint_types, total_range
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
        self.reward_hist_default = reward_hist_default
        value_range = total_range(self.reward_funcs, self.reward_weights.tolist())
        self.reward_hist = {"train": RewardHistogram(value_range, "reward_hist"),
                            "eval": RewardHistogram(value_range, "eval_reward_hist")}
        self._step_beta = self.beta  # the beta the current optimizer step's loss uses, logged with that step
        self._step_kls_from = 0  # where the current step's entries start in `_metrics["train"]["kl"]`
        self.add_callback(_AfterOptimizerStep(self._after_optimizer_step))
        if kl_controller is not None:
            self.add_callback(kl_controller)  # an ExportableState callback: HF saves it in every checkpoint

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
        # TRL gathers every process's rewards (in rank order): gather their rows' constraint types the same way
        types = gather_object([constraint_types(row, self.reward_hist_default) for row in inputs])
        self.reward_hist["train" if self.model.training else "eval"].add(types, total.tolist())
        return rewards_per_func

    def _after_optimizer_step(self) -> None:
        """Adaptive beta: one update from this step's KL (mean of its micro-batches, all processes); the next
        step's loss uses the new beta."""
        kls = self._metrics["train"].get("kl", [])[self._step_kls_from :]
        self._step_kls_from += len(kls)
        self._step_beta = self.beta
        if self.kl_controller is not None:
            self.beta = self.kl_controller.update(self._mean_over_processes(kls))

    def _mean_over_processes(self, values: list[float]) -> float:
        valid = [v for v in values if not math.isnan(v)]
        mean = sum(valid) / len(valid) if valid else math.nan
        if self.accelerator.num_processes == 1:
            return mean
        local = torch.tensor([mean if valid else 0.0, float(bool(valid))], dtype=torch.float64,
                             device=self.accelerator.device)
        total, count = self.accelerator.reduce(local, reduction="sum").tolist()
        return total / count if count else math.nan

    def _load_callback_state(self) -> None:
        """Resume: adaptive beta continues from the checkpoint's (`trainer_state.json` -> `stateful_callbacks`)."""
        super()._load_callback_state()
        if self.kl_controller is None:
            return
        # with `restore_callback_states_from_checkpoint` HF has swapped in a rebuilt controller: follow it
        self.kl_controller = next(cb for cb in self.callback_handler.callbacks if isinstance(cb, AdaptiveBeta))
        saved = self.state.stateful_callbacks.get(AdaptiveBeta.__name__)
        if saved is None:
            logging.getLogger(__name__).warning(
                "the checkpoint holds no adaptive-beta state: beta restarts at algo.beta=%g", self.kl_controller.beta)
        else:
            self.kl_controller.beta = float(saved["args"]["beta"])
        self.beta = self._step_beta = self.kl_controller.beta

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        if mode == "eval" or "loss" in logs:  # not the end-of-training summary
            if mode == "train":
                logs["beta"] = self._step_beta
            wandb_run = None
            if self.args.report_to and "wandb" in self.args.report_to:
                import wandb

                wandb_run = wandb.run
            logs.update(self.reward_hist[mode].flush(wandb_run))
        super().log(logs, start_time)
        if mode == "train":
            self._step_kls_from = 0  # TRL's log has emptied `_metrics["train"]`


class _AfterOptimizerStep(TrainerCallback):
    """Calls `fn` after every optimizer step (HF's `on_step_end`: before that step's logging and checkpoint)."""

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def on_step_end(self, args, state, control, **kwargs):
        self.fn()


def _check_finite_weights(model: torch.nn.Module, step: int) -> None:
    for name, param in model.named_parameters():
        if param.requires_grad and not bool(torch.isfinite(param.detach()).all()):
            raise TrainingError(
                f"non-finite weights ({name}) at step {step}: training diverged at step {step - 1} (lower trainer.lr?)"
            )
