"""TRL `GRPOTrainer` with the few things posttrain changes, each small and documented:

1. The loss is TRL's `_compute_loss`. With `kernels != trl` every log-prob TRL asks for (old, reference and
   policy passes) comes from a `posttrain.kernels` backend behind TRL's `_get_per_token_logps_and_entropies`
   (`kernel_logps.KernelLogpsMixin`). Over TRL's loss: the k1/k2 KL estimators (`kl_estimators`), `kl_p95`. Every
   forward uses the position ids generation used (`policy_forward.add_mask_position_ids`). TRL's head scores in
   fp32 also for a PEFT model with a tied head (`policy_forward.fp32_fused_head`: TRL's cast fails there).
2. Adaptive beta (`algo.kl.target`): after each optimizer step beta follows that step's KL (`kl_control`); the
   controller's state is in every checkpoint (`trainer_state.json`), so `resume=auto` continues its beta.
3. Guards: a non-finite loss stops training with the step number; checkpoints are written atomically.
4. Rollouts from a `posttrain.rollout` engine when `algo.generation.backend` is a merged-copy backend (`bf16_copy`,
   `static`): the copy is re-synced once per optimizer step before it samples; the sync time and the sampling
   rate are logged (`rollout/sync_seconds`, `rollout/tokens_per_second`). `hf` and `vllm` stay TRL's own paths.
   The copy's log-probs against the learner's are logged every step and, with `algo.sampler_correction`, importance-
   sampled away as TRL does for vLLM (`sampler_mismatch`).
5. DAPO dynamic sampling (`algo.dynamic_sampling.enabled`): groups whose rewards are all equal are replaced by
   freshly generated ones, at most `max_rounds` extra generation batches per step (`dynamic_sampling`); logged:
   `dynamic_sampling/zero_std_frac`, `/extra_generations`, `/informative_frac`.
6. Logging: reward histograms by constraint type (`reward_hist/<type>/<bin>` counts in metrics.jsonl, wandb
   histograms), beta each step; `kl` and `kl_p95` on both paths with one meaning (`_record_kl`); TRL already logs
   per-reward means, completion lengths, clip ratios and the fraction of zero-std groups.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import _ForwardRedirection

from posttrain.algos.grpo.device_metrics import resolve_metrics
from posttrain.algos.grpo.dynamic_sampling import DynamicSamplingMixin
from posttrain.algos.grpo.kernel_logps import KernelLogpsMixin
from posttrain.algos.grpo.kl_control import AdaptiveBeta
from posttrain.algos.grpo.kl_estimators import kl_term, reduce_like_trl
from posttrain.algos.grpo.policy_forward import (
    add_mask_position_ids,
    fp32_fused_head,
    global_masked_mean,
    global_p95,
    mean_over_processes,
    take_over_fp32_head,
)
from posttrain.algos.grpo.reward_hist import RewardHistogram, constraint_types, total_range
from posttrain.algos.grpo.sampler_mismatch import add_correction, record_mismatch, trl_applies_ratio
from posttrain.checkpoints import AtomicCheckpointMixin
from posttrain.errors import TrainingError
from posttrain.guards import check_finite_loss, check_finite_weights
from posttrain.lora_plus import LoraPlusMixin
from posttrain.rollout.engine import RolloutEngine


class PosttrainGRPOTrainer(AtomicCheckpointMixin, LoraPlusMixin, DynamicSamplingMixin, KernelLogpsMixin, GRPOTrainer):
    args: GRPOConfig
    heldout_before: dict[str, Any] | None = None  # held-out accuracy of the starting model (algo.heldout)
    trl_kl_estimators: tuple[str, ...] = ("k3",)  # what TRL's loss adds itself; the others: `kl_estimators`

    def __init__(
        self,
        *args,
        kernel_backend: str = "trl",
        kl_estimator: str = "k3",
        kl_controller: AdaptiveBeta | None = None,
        reward_hist_default: str = "all",
        dynamic_sampling_rounds: int = 0,
        dynamic_sampling_refill_groups: int | None = None,
        sampler_correction: bool = False,
        share_prompts: bool = False,
        loraplus_lr_ratio: float | None = None,
        base_model: str | None = None,
        **kwargs,
    ):
        self.base_model = base_model
        own_fp32_head = take_over_fp32_head(kwargs.get("args"), kwargs.get("model"))
        super().__init__(*args, **kwargs)
        if own_fp32_head:
            fp32_fused_head(self.model, self.temperature, self.args)
        for model in (self.model, self.ref_model):  # every forward at the positions generation used
            if model is not None:
                add_mask_position_ids(self.accelerator.unwrap_model(model))
        self._forward_redirection = _ForwardRedirection()
        self.kernel_backend = kernel_backend
        self.kl_estimator = kl_estimator
        self.kl_controller = kl_controller
        self.reward_hist_default = reward_hist_default
        value_range = total_range(self.reward_funcs, self.reward_weights.tolist())  # type: ignore[arg-type]
        self.reward_hist = {
            "train": RewardHistogram(value_range, "reward_hist"),
            "eval": RewardHistogram(value_range, "eval_reward_hist"),
        }
        self._step_beta = self.beta  # the beta the current optimizer step's loss uses, logged with that step
        self._step_kls_from = 0  # where the current step's entries start in `_metrics["train"]["kl"]`
        self.add_callback(_AfterOptimizerStep(self._after_optimizer_step))
        self.dynamic_sampling_rounds = dynamic_sampling_rounds  # 0: off; else the cap on extra generation batches
        self.dynamic_sampling_refill_groups = dynamic_sampling_refill_groups  # per extra batch; None: the step's
        self.sampler_correction = sampler_correction  # importance-sample a rollout copy's samples (sampler_mismatch)
        self.share_prompts = share_prompts  # kernel path: each distinct prompt once (shared_prompt)
        self.loraplus_lr_ratio = loraplus_lr_ratio
        self.rollout: RolloutEngine | None = None  # a merged-copy backend's engine (`attach_rollout`)
        self._rollout_step = self.state.global_step
        if kl_controller is not None:
            self.add_callback(kl_controller)  # an ExportableState callback: HF saves it in every checkpoint

    # -- loss -------------------------------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        """TRL's loss (its log-probs from `kernel_backend`: `KernelLogpsMixin`), plus what TRL's loss lacks: the k1
        and k2 KL estimators (`kl_estimators`), `kl_p95`, the rollout copy's mismatch and correction."""
        beta, own_kl = self.beta, self.beta != 0.0 and self.kl_estimator not in self.trl_kl_estimators
        self._capture_policy_logps = True
        try:
            if own_kl:
                self.beta = 0.0  # TRL adds no KL term: this estimator's is added below
            with trl_applies_ratio(self, inputs):
                loss = super()._compute_loss(model, inputs)
        finally:
            self._capture_policy_logps = False
            self.beta = beta
        logps, mask = self._policy_logps, inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        kl = None
        if beta != 0.0:
            kl = kl_term(
                logps if own_kl else logps.detach(),
                inputs["ref_per_token_logps"],
                mask,
                inputs.get("old_per_token_logps"),
                estimator=self.kl_estimator,
                bias_correction=self.args.use_bias_correction_kl,
                importance_sampling_level=self.importance_sampling_level,
            )
            if own_kl:
                loss = loss + beta * reduce_like_trl(self, kl, mask, inputs)
        self._record_kl(kl, mask, trl_logged_mean=not own_kl)
        self._record_sampler_mismatch(inputs, logps.detach())
        check_finite_loss(loss, self.state.global_step + 1)
        return loss

    def _record_sampler_mismatch(self, inputs: dict[str, Any], policy_logps: torch.Tensor) -> None:
        """The rollout copy's log-probs against the learner's (`sampler_mismatch`); vLLM's TRL logs itself."""
        sampler = inputs.get("sampling_per_token_logps")
        if sampler is None or self.use_vllm:
            return
        learner = inputs.get("old_per_token_logps", policy_logps)
        record_mismatch(self, "train" if self.model.training else "eval", learner, sampler, inputs["completion_mask"])

    def _record_kl(self, kl: torch.Tensor | None, mask: torch.Tensor, trl_logged_mean: bool) -> None:
        """`kl`: token mean over all processes of the per-token KL term as it enters the loss (`kl_term`; TRL logs
        it itself for k3); `kl_p95`: its 95th percentile. NaN (logged as null) when beta == 0: no KL."""
        metrics = self._metrics["train" if self.model.training else "eval"]
        if kl is None:
            metrics["kl"].append(math.nan)
            metrics["kl_p95"].append(math.nan)
            return
        if not trl_logged_mean:
            metrics["kl"].append(global_masked_mean(self.accelerator, kl, mask))
        metrics["kl_p95"].append(global_p95(self.accelerator, kl, mask))

    def attach_rollout(self, engine: RolloutEngine | None) -> None:
        """Sample from `engine` (its copy in step with the policy as of now) instead of TRL's `generate`."""
        self.rollout = engine
        self._rollout_step = self.state.global_step

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card naming the hub model posttrain started from (`model.hub_id`): TRL reads the config's
        `_name_or_path`, which posttrain's offline loads leave empty or a local directory ("a fine-tuned version of
        None"). A model with no hub id (random init, a local checkpoint) gets no card rather than a wrong one."""
        if not self.base_model:
            return
        config = self.accelerator.unwrap_model(self.model).config
        saved, config._name_or_path = config._name_or_path, self.base_model
        try:
            super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        finally:
            config._name_or_path = saved

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """With a rollout engine, completions come from it; its copy is re-synced once per optimizer step."""
        if self.rollout is None or self.use_vllm or images is not None or multimodal_fields:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        mode = "train" if self.model.training else "eval"
        if self.state.global_step != self._rollout_step:
            seconds = self.rollout.sync(self.accelerator.unwrap_model(self.model))
            self._metrics[mode]["rollout/sync_seconds"].append(seconds)
            self._rollout_step = self.state.global_step
        start = time.perf_counter()
        completion_ids, sampler_logps = self.rollout.generate_with_logprobs(prompt_ids)
        tokens = sum(len(ids) for ids in completion_ids)
        self._metrics[mode]["rollout/tokens_per_second"].append(tokens / max(time.perf_counter() - start, 1e-9))
        return completion_ids, sampler_logps  # TRL keeps them as `sampling_per_token_logps`

    def _generate_and_score_completions(self, inputs):
        try:
            scored = super()._generate_and_score_completions(inputs)
            if self.sampler_correction:
                add_correction(self, scored)
            return scored
        except RuntimeError as ex:
            # NaN/inf weights or overflowing logits (a diverged update) break sampling before any loss: say so
            step = self.state.global_step + 1
            check_finite_weights(self.model, step)
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
            self.beta = self.kl_controller.update(mean_over_processes(self.accelerator, kls))

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
                "the checkpoint holds no adaptive-beta state: beta restarts at algo.trl.beta=%g",
                self.kl_controller.beta,
            )
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
        resolve_metrics(self._metrics[mode])  # TRL's log averages floats
        super().log(logs, start_time)
        if mode == "train":
            self._step_kls_from = 0  # TRL's log has emptied `_metrics["train"]`


class _AfterOptimizerStep(TrainerCallback):
    """Calls `fn` after every optimizer step (HF's `on_step_end`: before that step's logging and checkpoint)."""

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def on_step_end(self, args, state, control, **kwargs):
        self.fn()
