"""`algo=grpo`: Group Relative Policy Optimization on TRL's `GRPOTrainer` (verifiable rewards, no critic).

    python train.py algo=grpo data=arith algo.trl.beta=0.04 algo.trl.num_generations=8 kernels=fused

Modules: `config` (schema, rules), `trl_fields` (`algo.trl`: GRPOConfig's fields), `build` (GRPOConfig, trainer
assembly), `trainer` (the TRL subclass),
`kl_control` (adaptive beta), `rewards` (reward functions from `algo.rewards`), `reward_hist`, `evaluate` (mode=eval).
This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from posttrain.algos.base import Algorithm, KVCache, ModelCopy, Reservation, Workload
from posttrain.algos.grpo.config import GRPOAlgoConfig, check_kernel, kernel_refusal, validate_grpo
from posttrain.algos.grpo.trl_fields import SET_BY_POSTTRAIN
from posttrain.errors import ConfigError
from posttrain.rollout import BACKENDS as ROLLOUT_BACKENDS

GPU_COPY_SHARE = 0.05  # of hw.device_gib: the largest rollout copy a GPU profile's generation backend makes
CPU_COPY_SHARE = 0.25  # ... and a CPU profile's (SmolLM2-135M: 1% of 24 GiB; gpt-oss-20b even in MXFP4: 53%)


def _copy_share(cfg: DictConfig) -> float:
    """The rollout copy's weights (bf16; native MXFP4 experts as they are) as a share of the device's memory."""
    from posttrain.hardware.params import count_params

    counts = count_params(cfg)
    mxfp4_values = counts.experts if counts.mxfp4_bytes else 0
    return ((counts.total - mxfp4_values) * 2 + counts.mxfp4_bytes) / (float(cfg.hw.device_gib) * 2**30)


class GRPO(Algorithm):
    name = "grpo"
    schema = GRPOAlgoConfig
    console = {
        "show": {"reward": "reward", "kl": "kl", "completions/mean_length": "len", "step_time": "s/step"},
        "trend": ("reward", "kl", "loss"),
        "plots": {"reward.png": ("reward", "kl", "completions/mean_length")},
    }
    objective = "reward_last5_mean"
    objective_direction = "maximize"
    derived_keys = {f"algo.trl.{name}": setting for name, setting in SET_BY_POSTTRAIN.items()}

    def validate(self, cfg: DictConfig) -> None:
        validate_grpo(cfg)

    def batch_multiple(self, cfg: DictConfig) -> int:
        return int(cfg.algo.trl.num_generations)  # whole groups per generation batch

    def apply_hardware(self, cfg: DictConfig, given: set[str]) -> dict[str, Any]:
        """GRPO's defaults for this device (`device_defaults`), each unless the command line chose: the kernel
        unless it cannot feed this config's loss (then TRL's own head, else the first backend that can), and the
        generation backend (hw=cpu: the bf16 rollout copy; h200: the static-cache
        copy). The
        backend applies to bf16 training, and on a CPU also to fp32 training of a pretrained model: decoding
        there is bound by reading the weights, which the bf16 copy halves (experiments/grpo_objectives, a CPU
        without AMX: 2.7 s against 3.6 s per `make train` step; over 5 seeds the copy, with the sampler
        correction, gained what the policy did, and with dynamic sampling what dynamic sampling did); tiny
        random models keep sampling from the policy (their tests compare runs exactly). A merged copy is a second
        set of weights; on a GPU it pays where decoding is bound by per-token launches, i.e. for small models: it
        applies only while the copy takes at most GPU_COPY_SHARE of the device (SmolLM2-135M and Llama-3.2-1B on
        an H200), on a CPU CPU_COPY_SHARE. Where the copy would be larger (GPT-OSS-20B, in MXFP4 or not), the run
        decodes the same way from the policy itself (`static_policy`: the static cache and compiled decode, LoRA
        unmerged). An engine draws its tokens with the device's sampler where the command line did not choose
        (hw=cpu: inverse_cdf)."""
        from posttrain.algos.grpo.device_defaults import device_defaults

        hw, gen, own = cfg.hw, cfg.algo.generation, device_defaults(cfg.hw)
        applied: dict[str, Any] = {}
        with open_dict(cfg):
            kernel_given = bool({"kernels", "kernels.backend"} & given)
            if own.kernels and cfg.kernels.backend == "trl" and not kernel_given:
                cfg.kernels.backend = applied["kernels.backend"] = own.kernels
            if not kernel_given and kernel_refusal(cfg, cfg.kernels.backend):
                # the device's kernel is only a speed default: TRL's own head, else the first posttrain backend
                # that feeds this loss
                from posttrain.kernels.registry import BACKENDS, TRL, available

                able = [b for b in (TRL, *BACKENDS) if not kernel_refusal(cfg, b) and (b == TRL or available(b)[0])]
                if able:
                    cfg.kernels.backend = applied["kernels.backend"] = able[0]
            check_kernel(cfg)
            backend = own.generation_backend
            cpu_pretrained = hw.device == "cpu" and not cfg.model.get("tiny", False)
            wanted = backend and (hw.precision == "bf16" or cpu_pretrained) and gen.backend == "hf"
            if wanted and "algo.generation.backend" not in given:
                share = GPU_COPY_SHARE if hw.device == "cuda" else CPU_COPY_SHARE
                if _copy_share(cfg) <= share:
                    gen.backend = applied["algo.generation.backend"] = backend
                else:
                    gen.backend = applied["algo.generation.backend"] = "static_policy"
        sampler = own.generation_sampler
        engine = ROLLOUT_BACKENDS[gen.backend].engine
        if sampler and engine and "algo.generation.sampler" not in given and gen.sampler != sampler:
            gen.sampler = applied["algo.generation.sampler"] = sampler
        if gen.sampler != "multinomial" and not engine:
            raise ConfigError(
                f"algo.generation.sampler={gen.sampler} is a posttrain rollout engine's sampler (algo.generation."
                f"backend=bf16_copy, static or static_policy, which hw=cpu picks for pretrained models); "
                f"{gen.backend} samples with TRL's"
            )
        return applied

    def workload(self, cfg: DictConfig) -> Workload:
        """`trainer.per_device_batch_size` counts *completions* (TRL's convention): prompts x num_generations.

        TRL left-pads a generation batch's prompts to its longest one: the longest prompt of the data (measured with
        the run's tokenizer when it is at hand, else `algo.max_prompt_length`), plus `max_completion_length`. A
        generation round produces per_device_batch x grad_accum completions at once (TRL's steps_per_generation):
        their KV cache, a colocated vLLM, or the merged rollout copy with its static cache. The loss scores the
        completion tokens: with `kernels=trl` through TRL's fused head, whose weight TRL casts to fp32 in bf16
        training (for a PEFT model with a tied head the trainer upcasts it tile by tile instead:
        `policy_forward.fp32_fused_head`). A frozen reference copy exists when beta > 0 and the whole model trains
        (with LoRA the reference is the base with adapters disabled: no copy); the reference (and, with
        num_iterations > 1 or vLLM's importance sampling, the old-policy) log-probs are no-grad passes over whole
        sequences, per_device_batch rows at a time."""
        from posttrain.kernels.registry import BACKENDS
        from posttrain.models import hf_config
        from posttrain.rollout import BACKENDS as ROLLOUT_BACKENDS
        from posttrain.rollout import STATIC_CACHE, copy_dtype

        algo, trl, batch = cfg.algo, cfg.algo.trl, int(cfg.trainer.per_device_batch_size)
        k = int(trl.num_generations)
        longest = _longest_prompt(cfg)
        prompt = longest or int(algo.max_prompt_length)
        completion = int(trl.max_completion_length)
        seq = prompt + completion
        gen = batch * int(cfg.trainer.grad_accum)
        prompts = f"{gen / k:g}" if gen % k else str(gen // k)
        backend = cfg.kernels.backend
        gen_backend = algo.generation.backend
        vllm = gen_backend == "vllm"
        lora = bool(cfg.model.lora.enabled)
        # GRPOConfig.cast_lm_head_to_fp32 (build.grpo_args): in bf16/fp16 training on TRL's loss path
        cast = cfg.hw.precision != "fp32" and not (backend in BACKENDS and BACKENDS[backend].fp32_softmax)
        tied = bool(getattr(hf_config(cfg.model), "tie_word_embeddings", False))
        copy = ROLLOUT_BACKENDS[gen_backend].merged_copy
        gen_dtype = copy_dtype(gen_backend, cfg.hw.precision) if copy else None
        copies: list[ModelCopy] = []
        if float(trl.beta) > 0 and not lora:
            copies.append(ModelCopy("reference model", "frozen copy (beta > 0, no LoRA)"))
        if copy:
            packed = cfg.hw.device == "cpu" and gen_dtype == "bfloat16"
            copies.append(ModelCopy("rollout copy", f"merged copy in {gen_dtype}", gen_dtype, packed_linears=packed))
        caches: tuple[KVCache, ...] = ()
        if gen_backend in STATIC_CACHE:
            positions = int(algo.max_prompt_length) + completion
            where = "the copy's" if copy else "the policy's"
            note = f"{where}: {gen} sequences x {positions} positions, every layer full-length"
            caches = (KVCache("static KV cache", gen, positions, gen_dtype, note),)
        share = _vllm_share(cfg) if vllm and trl.vllm_mode == "colocate" else 0.0
        reserved = (Reservation("vLLM (colocated)", share, f"gpu_memory_utilization={share}"),) if share else ()
        lengths = f"longest prompt of data={cfg.data.name}: {longest}" if longest else "algo.max_prompt_length"
        return Workload(
            seqs=batch,
            seq_len=seq,
            logit_tokens=completion,
            note=f"{batch} completions/micro-batch; rollout {gen} = {prompts} prompts x {k} generations; "
            f"prompt {prompt} tokens ({lengths})",
            train_mode="lora" if lora else "full",
            loss_backend=backend,
            kernels_apply=True,
            batch_multiple=k,
            head_weight_fp32=cast and not (lora and tied),
            head_compute_fp32=cast,
            score_seqs=batch if float(trl.beta) > 0 or int(trl.num_iterations) > 1 or vllm else 0,
            gen_seqs=0 if vllm else gen,
            gen_len=seq,
            gen_prompt_len=prompt,
            gen_dtype=gen_dtype,
            copies=tuple(copies),
            caches=caches,
            reserved=reserved,
            # the cheap fixes the memory planner may try: vLLM as a server; sampling from the policy with HF's
            # generate instead of a merged copy or a static cache
            memory_options=(
                *(("algo.trl.vllm_mode=server",) if vllm and trl.vllm_mode == "colocate" else ()),
                *(("algo.generation.backend=hf",) if copy or caches else ()),
            ),
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.grpo.build import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        """Held-out greedy accuracy before and after training (`algo.heldout` > 0)."""
        from posttrain.algos.grpo.heldout import heldout_summary

        return heldout_summary(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.grpo.evaluate import evaluate

        return evaluate(cfg, run_dir, checkpoint)

    def trained_lm(self, cfg: DictConfig, checkpoint: Path | None) -> tuple[Any, Any]:
        from posttrain.algos.grpo.evaluate import load_trained_weights
        from posttrain.models import load

        model, tokenizer = load(cfg)
        if checkpoint is not None:
            load_trained_weights(model, checkpoint)
        return model, tokenizer


def _vllm_share(cfg: DictConfig) -> float:
    """The device share a colocated vLLM reserves (TRL's `vllm_gpu_memory_utilization`)."""
    return float(cfg.algo.trl.vllm_gpu_memory_utilization)


def _longest_prompt(cfg: DictConfig) -> int | None:
    """Tokens of the data's longest prompt (chat template and generation prompt applied), or None when the run's
    tokenizer or data is not at hand (`posttrain.hardware.lengths`)."""
    from posttrain.errors import UserError
    from posttrain.hardware.lengths import measured

    def measure(tokenizer) -> int:
        from posttrain.data import build_grpo_dataset
        from posttrain.data.grpo import prompt_length

        ds = build_grpo_dataset(cfg.data, tokenizer, int(cfg.algo.max_prompt_length))
        return max(prompt_length(tokenizer, p) for p in ds["prompt"])

    try:
        return measured(cfg, ("algo.max_prompt_length",), measure)
    except UserError:  # data the run would refuse: planned with the bound, the run reports the data error
        return None


ALGORITHM = GRPO()
