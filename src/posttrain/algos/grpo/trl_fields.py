"""`algo.trl`: TRL's `GRPOConfig` fields passed through, with TRL's names, types and defaults.

The fields are read from TRL's own source (`trl/trainer/grpo_config.py`, parsed, not imported: importing TRL
imports torch, and composing a config stays torch-free), so posttrain copies no name or default; a TRL release that
adds, renames or re-defaults a field changes `algo.trl` with it (tests/algos/grpo/test_trl_fields.py holds the
parse to `dataclasses.fields(GRPOConfig)`). OmegaConf checks each value's type at compose time; `GRPOConfig` itself
validates the values (its `__post_init__`) when `posttrain.algos.grpo.build.grpo_args` builds it, before the model
loads, and its ValueError becomes one `error:` line.

Left out are the fields posttrain sets from its own settings (`SET_BY_POSTTRAIN`, each naming the setting) and
those of `TrainingArguments` (the `trainer` and `hw` groups). Posttrain's defaults differ from TRL's in three fields
(`POSTTRAIN_DEFAULTS`, each with its reason); `RANGES` are the bounds posttrain holds before anything loads.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any, Optional

from posttrain.config.ranges import RANGE, Free, Range

# GRPOConfig field -> the posttrain setting it is derived from (setting it under algo.trl is refused in one line)
SET_BY_POSTTRAIN = {
    "learning_rate": "trainer.lr",
    "model_init_kwargs": "model.* (posttrain loads the model)",
    "trust_remote_code": "model.* (posttrain loads the model)",
    "remove_unused_columns": "posttrain (reward functions read the data's columns)",
    "cast_lm_head_to_fp32": "hw.precision and kernels (posttrain.algos.grpo.build)",
    "generation_kwargs": "posttrain (use_cache for TRL's generate)",
    "use_vllm": "algo.generation.backend=vllm",
    "reward_weights": "data.rewards",
}
# posttrain's defaults where they differ from TRL's, each on purpose
POSTTRAIN_DEFAULTS: dict[str, Any] = {
    # grpo, not TRL's dapo: on the make-train preset (on-policy, where the types differ only in normalisation) dapo -
    # grpo was +0.06 [-0.46, +0.58] held-out over 3 seeds, no reason to change the loss the preset's 5-seed
    # robustness was measured with (experiments/grpo_objectives)
    "loss_type": "grpo",
    "beta": 0.04,  # a KL term by default (TRL: 0, no reference model)
    "max_completion_length": 16,  # the offline arithmetic tasks' answers (TRL: 512)
}
# posttrain's bounds on TRL's values, checked at compose time (config.fields.check_declared); the rest are free
RANGES: dict[str, Range] = {
    "num_generations": Range(ge=2, note="advantages are per group"),
    "max_completion_length": Range(gt=0),
    "steps_per_generation": Range(gt=0, note="or null: trainer.grad_accum"),
    "generation_batch_size": Range(gt=0),
    "temperature": Range(gt=0),
    "top_p": Range(gt=0, le=1),
    "top_k": Range(ge=0, note="0: off"),
    "min_p": Range(ge=0, le=1, note="or null: off"),
    "repetition_penalty": Range(gt=0, note="1: off"),
    "vllm_gpu_memory_utilization": Range(gt=0, le=1),
    "beta": Range(ge=0),
    "num_iterations": Range(gt=0),
    "epsilon": Range(ge=0),
    "epsilon_high": Range(ge=0, note="or null: epsilon"),
    "delta": Range(gt=0, note="or null: off"),
    "sapo_temperature_pos": Range(gt=0),
    "sapo_temperature_neg": Range(gt=0),
    "vespo_k_pos": Range(ge=0),
    "vespo_lambda_pos": Range(ge=0),
    "vespo_k_neg": Range(ge=0),
    "vespo_lambda_neg": Range(ge=0),
    "ref_model_mixup_alpha": Range(ge=0, le=1),
    "ref_model_sync_steps": Range(gt=0),
    "top_entropy_quantile": Range(ge=0, le=1),
    "entropy_coef_min": Range(ge=0),
    "entropy_coef_max": Range(ge=0),
    "entropy_coef_delta": Range(ge=0),
    "entropy_target": Range(ge=0),
    "vllm_importance_sampling_clip_min": Range(ge=0, note="or null: no lower bound"),
    "vllm_importance_sampling_clip_max": Range(gt=0, note="or null: no upper bound"),
    "off_policy_mask_threshold": Range(gt=0, note="or null: off"),
}
_FREE = Free("TRL's GRPOConfig field: validated by GRPOConfig when the trainer is built")
_PRIMITIVES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str}


@dataclasses.dataclass(frozen=True)
class TRLField:
    name: str
    annotation: str  # as written in TRL's source, e.g. "float | None"
    default: Any
    help: str


def grpo_config_source() -> Path:
    """TRL's grpo_config.py, found without importing TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("trl is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "grpo_config.py"


@cache
def grpo_config_fields() -> tuple[TRLField, ...]:
    """The fields the `GRPOConfig` class body declares (TrainingArguments' overrides included), in order."""
    tree = ast.parse(grpo_config_source().read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig")
    out = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            continue
        call = node.value
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "field"):
            continue  # a class constant such as _VALID_DICT_FIELDS
        kw = {k.arg: k.value for k in call.keywords}
        if "default" not in kw:
            raise ValueError(f"GRPOConfig.{node.target.id} has no literal default (TRL changed its config's form)")
        metadata = ast.literal_eval(kw["metadata"]) if "metadata" in kw else {}
        help_text = metadata.get("help", "")
        out.append(TRLField(node.target.id, ast.unparse(node.annotation), ast.literal_eval(kw["default"]), help_text))
    return tuple(out)


def _schema_type(annotation: str) -> Any:
    """The OmegaConf type of a TRL annotation: a primitive or Optional[primitive]; Any for what OmegaConf lacks
    (`dict | str | None`, `int | str | None`, `list[float] | None`)."""
    parts = [part.strip() for part in annotation.split("|")]
    types_ = [_PRIMITIVES.get(part) for part in parts if part != "None"]
    if len(types_) != 1 or types_[0] is None:
        return Any
    return types_[0] if len(parts) == 1 else Optional[types_[0]]  # noqa: UP045 - OmegaConf reads typing.Optional


@cache
def passed_through() -> tuple[TRLField, ...]:
    """The fields `algo.trl` holds: GRPOConfig's own, less `SET_BY_POSTTRAIN`."""
    return tuple(f for f in grpo_config_fields() if f.name not in SET_BY_POSTTRAIN)


def trl_kwargs(algo: Any) -> dict[str, Any]:
    """GRPOConfig keyword arguments from a composed `algo` node (its `trl` fields)."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(algo.trl)
    assert isinstance(values, dict)
    return {str(name): value for name, value in values.items()}


@cache
def trl_schema() -> type:
    """The `algo.trl` dataclass: one field per passed-through GRPOConfig field, TRL's type and default (posttrain's
    where `POSTTRAIN_DEFAULTS` says), with its range or a note that GRPOConfig checks it."""
    specs = []
    for f in passed_through():
        default = POSTTRAIN_DEFAULTS.get(f.name, f.default)
        meta = {RANGE: RANGES.get(f.name, _FREE)}
        specs.append((f.name, _schema_type(f.annotation), dataclasses.field(default=default, metadata=meta)))
    return dataclasses.make_dataclass("TRLGRPOConfig", specs)
