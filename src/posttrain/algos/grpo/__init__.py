"""`algo=grpo`: Group Relative Policy Optimization on TRL's `GRPOTrainer` (verifiable rewards, no critic).

    python train.py algo=grpo data=arith algo.beta=0.04 algo.num_generations=8 kernels=fused

Modules: `config` (schema, rules), `build` (GRPOConfig mapping, trainer assembly), `trainer` (the TRL subclass),
`kl_control` (adaptive beta), `rewards` (reward functions from `data.rewards`), `reward_hist`, `evaluate` (mode=eval).
This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from posttrain.algos.base import Algorithm, Workload
from posttrain.algos.grpo.config import GRPOAlgoConfig, validate_grpo


class GRPO(Algorithm):
    name = "grpo"
    schema = GRPOAlgoConfig
    console = {
        "show": {"reward": "reward", "kl": "kl", "completions/mean_length": "len", "step_time": "s/step"},
        "trend": ("reward", "kl", "loss"),
        "plots": {"reward.png": ("reward", "kl", "completions/mean_length")},
    }
    objective = "reward_last5_mean"

    def validate(self, cfg: DictConfig) -> None:
        validate_grpo(cfg)

    def batch_multiple(self, cfg: DictConfig) -> int:
        return int(cfg.algo.num_generations)  # whole groups per generation batch

    def apply_hardware(self, cfg: DictConfig, given: set[str]) -> dict[str, Any]:
        """The profile's vLLM mode (colocate on one big device, server otherwise) and, for bf16 training, its
        generation backend (hw=cpu: the bf16 rollout copy), each unless the command line chose."""
        hw, gen = cfg.hw, cfg.algo.generation
        applied: dict[str, Any] = {}
        with open_dict(cfg):
            if hw.vllm_mode and "algo.generation.vllm_mode" not in given and gen.vllm_mode != hw.vllm_mode:
                gen.vllm_mode = applied["algo.generation.vllm_mode"] = hw.vllm_mode
            backend = hw.get("generation_backend")
            if backend and hw.precision == "bf16" and gen.backend == "hf" and "algo.generation.backend" not in given:
                gen.backend = applied["algo.generation.backend"] = backend
        return applied

    def workload(self, cfg: DictConfig) -> Workload:
        """`trainer.per_device_batch_size` counts *completions* (TRL's convention): prompts x num_generations. A
        generation round produces per_device_batch x grad_accum completions at once (TRL's steps_per_generation),
        whose KV cache (or a colocated vLLM) is held while the optimizer states are resident. The loss needs logits
        of the completion tokens only. A frozen reference copy exists when beta > 0 and the whole model trains
        (with LoRA the reference is the base with adapters disabled: no copy)."""
        algo, batch = cfg.algo, int(cfg.trainer.per_device_batch_size)
        k = int(algo.num_generations)
        seq = int(algo.max_prompt_length) + int(algo.max_completion_length)
        gen = batch * int(cfg.trainer.grad_accum)
        prompts = f"{gen / k:g}" if gen % k else str(gen // k)
        vllm = algo.generation.backend == "vllm"
        return Workload(
            seqs=batch,
            seq_len=seq,
            logit_tokens=int(algo.max_completion_length) + 1,
            note=f"{batch} completions/micro-batch; rollout {gen} = {prompts} prompts x {k} generations",
            train_mode="lora" if cfg.model.lora.enabled else "full",
            loss_backend=cfg.kernels.backend,
            kernels_apply=True,
            batch_multiple=k,
            gen_seqs=0 if vllm else gen,
            gen_len=seq,
            gen_prompt_len=int(algo.max_prompt_length),
            vllm_colocated=vllm and algo.generation.vllm_mode == "colocate",
            memory_options=("algo.generation.vllm_mode=server",)
            if vllm and algo.generation.vllm_mode == "colocate"
            else (),
            ref_copy=float(algo.beta) > 0 and not cfg.model.lora.enabled,
            rollout_copy=algo.generation.backend == "bf16_copy",
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.grpo.build import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        """Held-out greedy accuracy before and after training (`data.heldout` > 0)."""
        from posttrain.algos.grpo.heldout import heldout_summary

        return heldout_summary(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.grpo.evaluate import evaluate

        return evaluate(cfg, run_dir, checkpoint)


ALGORITHM = GRPO()
