"""The algorithm protocol: what `posttrain.run`, the config registry and the memory plan ask of an algorithm.

An algorithm is one package `posttrain/algos/<name>/` whose `__init__.py` sets `ALGORITHM = <Algorithm subclass>()`
(`posttrain.algos.registry` finds it; nothing else names it). The package's `__init__` must stay light (no torch):
composing a config imports it. The heavy parts (trainer, model, evaluation) are imported inside the methods.

    class MyAlgo(Algorithm):
        name = "mine"                       # the `algo=mine` choice; equals the package name
        schema = MyAlgoConfig               # dataclass of the `algo` group; its field defaults are THE defaults

        def validate(self, cfg): ...        # cross-field rules, one-line ConfigError, before anything loads
        def workload(self, cfg): ...        # -> Workload: what one micro-step puts through the model (memory plan)
        def build_trainer(self, cfg, run_dir, callbacks): ...   # -> an HF Trainer, ready to .train()
        def summarize(self, cfg, trainer, run_dir): ...          # -> extra summary.json keys after training
        def evaluate(self, cfg, run_dir, checkpoint): ...        # mode=eval on `eval.checkpoint` -> summary dict
        def trained_lm(self, cfg, checkpoint): ...               # optional: mode=export -> (model, tokenizer)

A `conf/algo/<name>.yaml` is optional: without one, `algo=<name>` composes the schema's defaults (the registry
stores it in Hydra's ConfigStore); with one, it holds no values (the schema's defaults are the defaults), only
its defaults list (e.g. the data set the algorithm uses when the command line names none). A plugin outside this
repository ships `posttrain/algos/<name>/` in a path entry of its own (`posttrain` and `posttrain.algos` are
namespace packages) and needs no file here.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import DictConfig

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback


@dataclass(frozen=True)
class ModelCopy:
    """A second set of the model's weights an algorithm keeps (a frozen reference, an encoder, a copy that
    generates): the memory plan counts its bytes without knowing what it is for."""

    name: str  # the plan's row ("reference model")
    note: str
    dtype: str | None = None  # None: as the trained weights are held (dtype, MXFP4, sharding); else whole, in it
    packed_linears: bool = False  # its linear weights again in oneDNN's packed layout (CPU bf16 matmuls)


@dataclass(frozen=True)
class KVCache:
    """A preallocated KV cache kept between generation rounds (a StaticCache: every layer full-length); generation
    then writes into it instead of growing one of its own."""

    name: str
    seqs: int
    positions: int  # per sequence
    dtype: str | None = None  # None: the trained weights' dtype
    note: str = ""


@dataclass(frozen=True)
class Reservation:
    """A share of the device's memory another engine reserves for itself (a colocated vLLM)."""

    name: str
    share: float
    note: str


@dataclass
class Workload:
    """What one training micro-step of an algorithm puts through the model, per device (the memory plan's input).

    Lengths are the longest the data forms when the algorithm can measure them (its data tokenized with the run's
    tokenizer, when that tokenizer is at hand without a download), else the config's bounds; `note` says which."""

    seqs: int  # sequences in one forward/backward
    seq_len: int
    logit_tokens: float  # positions per logit row whose logits the loss forms, a mean where rows differ (0: none)
    note: str  # one line for the plan table ("8 completions/micro-batch; ...")
    train_mode: str = "lora"  # lora | full | frozen (the base model does not train)
    loss_backend: str = "eager"  # how the LM-head logits are held: a posttrain.kernels backend, `trl`, or eager
    kernels_apply: bool = False  # `kernels=<backend>` changes the loss (the plan may suggest another backend)
    batch_multiple: int = 1  # per-device batch x grad_accum x devices must be a multiple of this
    logit_rows: int | None = None  # sequences whose logits the loss forms (None: all `seqs`)
    # linear layers whose inputs the backward keeps for an adapter that is not a base weight (PEFT LoRA targets,
    # D2L's generated LoRA); None: model.lora.target_modules when train_mode is lora, none otherwise
    adapted_modules: tuple[str, ...] | None = None
    head_weight_fp32: bool = False  # the output projection's weight is held in fp32 (TRL's cast_lm_head_to_fp32)
    head_compute_fp32: bool = False  # the LM head's projection runs in fp32 (upcast weight tiles when not fp32)
    score_seqs: int = 0  # rows per no-grad log-prob pass over whole sequences (GRPO's reference/old log-probs)
    gen_seqs: int = 0  # sequences generated in one round with HF generate (0: no generation here)
    gen_len: int = 0
    gen_prompt_len: int = 0
    gen_dtype: str | None = None  # the dtype generation computes in (None: the trained weights')
    copies: tuple[ModelCopy, ...] = ()  # other sets of the model's weights kept for the whole run
    caches: tuple[KVCache, ...] = ()  # preallocated KV caches kept for the whole run
    reserved: tuple[Reservation, ...] = ()  # device shares other engines reserve
    # bytes the algorithm's own modules keep from the forward to the backward (D2L's hypernet input, ...), and the
    # bytes its loss's backward adds before the layers' (pooled-state gradients, ...), counted by the algorithm
    extra_kept_bytes: float = 0.0
    extra_top_bytes: float = 0.0
    extra_forward_bytes: float = 0.0  # the peak of the algorithm's own forward before the base model runs
    extra_note: str = ""
    extra_trainable: int = 0  # trainable parameters outside the base model (hypernetwork, projection head)
    # `key=value` overrides of this algorithm's own keys that cut memory, tried by the plan's suggestion
    memory_options: tuple[str, ...] = ()


class Algorithm(abc.ABC):
    """One training algorithm behind one interface; see the module docstring."""

    name: ClassVar[str]
    schema: ClassVar[type]
    # what a run shows (posttrain.callbacks.console.ConsoleSpec): `show` metric -> label (progress bar and a line per
    # logging step), `trend` (first-5 / last-5 means in summary.json and the end table), `plots` (plots/<file>)
    console: ClassVar[Mapping[str, Any]] = {}
    objective: ClassVar[str] = "loss_last5_mean"  # what sweeps optimise by default (a summary.json key)
    objective_direction: ClassVar[str] = "minimize"  # minimize | maximize: how a sweeper must treat `objective`
    # keys a library has that this algorithm derives from its own settings: key -> that setting (the error's hint)
    derived_keys: ClassVar[Mapping[str, str]] = {}

    def validate(self, cfg: DictConfig) -> None:  # noqa: B027 - optional hook
        """Cross-field rules of `cfg.algo` (with the rest of `cfg`): raise `ConfigError` in one line. No torch."""

    def batch_multiple(self, cfg: DictConfig) -> int:
        """The global batch (per_device x grad_accum x devices) must be a multiple of this (GRPO: a group)."""
        return 1

    def apply_hardware(self, cfg: DictConfig, given: set[str]) -> dict[str, Any]:
        """Adopt what the hw profile decides for this algorithm's own keys (unless in `given`, the command line's
        keys); returns what it set. Called once by `posttrain.hardware.apply_profile`."""
        return {}

    @abc.abstractmethod
    def workload(self, cfg: DictConfig) -> Workload:
        """Per-device work of one micro-step (sequences, lengths, copies, extra trainable parameters)."""

    @abc.abstractmethod
    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list[TrainerCallback]) -> Trainer:
        """Model, data and an HF `Trainer` subclass, ready to `.train(resume_from_checkpoint=...)`."""

    def summarize(self, cfg: DictConfig, trainer: Trainer, run_dir: Path) -> dict[str, Any]:
        """Keys added to summary.json after training (held-out evaluation, ...)."""
        return {}

    @abc.abstractmethod
    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        """`mode=eval`: score `checkpoint` (None: the starting weights) on held-out data; the summary dict."""

    def trained_lm(self, cfg: DictConfig, checkpoint: Path | None) -> tuple[Any, Any]:
        """`mode=export`: (the trained causal LM, PEFT-wrapped or not; its tokenizer) from `checkpoint`. An algorithm
        whose checkpoint is not one language model (D2L's hypernetwork) keeps this refusal."""
        from posttrain.errors import ConfigError

        raise ConfigError(f"mode=export: algo={self.name}'s checkpoint is not a single language model to export")
