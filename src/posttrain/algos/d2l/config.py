"""`algo=d2l` schema (Doc-to-LoRA hypernetwork) and its cross-field shape rules, checked before any model loads.

Shapes: the hypernet emits, for every target (layer, module), A `[r, d_in]` and B `[r, d_out]`.
- `per_rank_gen=true`: the Perceiver emits one latent per (layer, module, rank) and the head maps a latent to one
  row of A and one row of B; `false`: one latent per (layer, module), the head emits all r rows at once.
- `per_layer_processing=true`: layer l's latents cross-attend to layer l's activations of the context encoder and
  each layer has its own heads (so the encoder must run at least up to the deepest target layer);
  `false`: every latent reads the encoder's last layer and the heads are shared across layers.
So the aggregator has `num_layers * num_modules * (rank if per_rank_gen else 1)` queries; `aggregator.num_queries`
may be left null (derived) or must equal that number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from posttrain.config.ranges import free, local_path, num
from posttrain.config.validate import ConfigError


@dataclass
class D2LEncoderConfig:
    # Number of base layers the context encoder runs (early exit); null: as deep as the targets need.
    early_exit_layer: int | None = num(None, gt=0)  # at most the base's depth (validate_d2l)
    # true: the trimmed frozen copy shares the base's (frozen) tensors — no extra memory; false: a deep copy.
    share_weights: bool = True
    # Tokens per chunk the encoder reads at once. A longer document is split into chunks, one generated LoRA per
    # chunk, concatenated along the rank; past max_chunks chunks it is cut (max_chunks=1: truncate to
    # max_doc_length). The in-context teacher and baseline read exactly the same (cut) document.
    max_doc_length: int = num(256, gt=0)
    max_chunks: int = num(4, gt=0)


@dataclass
class D2LAggregatorConfig:
    num_blocks: int = num(2, gt=0)
    latent_size: int = num(64, gt=0)  # a multiple of num_heads (validate_d2l)
    num_heads: int = num(4, gt=0)
    # null: derived (layers * modules * (rank if per_rank_gen else 1)); when set it must equal that number.
    num_queries: int | None = num(None, gt=0)
    mlp_ratio: int = num(2, gt=0)


@dataclass
class D2LAlgoConfig:
    name: str = "d2l"
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    # base layers that get a generated LoRA; null: all
    layers: list[int] | None = free(None, "layer indices, checked against model.arch.num_hidden_layers")
    rank: int = num(4, gt=0)
    alpha: float = num(8.0, gt=0)  # update = alpha / rank * B^T A x
    per_rank_gen: bool = True
    per_layer_processing: bool = True
    # >0: a learned, document-independent LoRA block added to the generated one
    bias_lora_rank: int = num(0, ge=0)
    encoder: D2LEncoderConfig = field(default_factory=D2LEncoderConfig)
    aggregator: D2LAggregatorConfig = field(default_factory=D2LAggregatorConfig)
    ce_coef: float = num(1.0, ge=0)
    # >0: distil from the base model reading the document in context (top-k, cached)
    kl_coef: float = num(0.0, ge=0)
    kl_top_k: int = num(16, gt=0)
    kl_temperature: float = num(1.0, gt=0)
    # Where the teacher top-k cache lives; null: <run dir>/cache. Entries are keyed by what they depend on (base
    # weights' identity, teacher token ids, tokenizer and template, k, T), so runs may share one directory (e.g.
    # the seeds of an experiment on a pretrained base, whose teacher does not depend on the seed).
    kl_cache_dir: str | None = local_path(None, kind="dir", must_exist=False)
    l1_coef: float = num(0.0, ge=0)  # L1 penalty on the generated A/B entries (mean |.|)
    max_length: int = num(128, gt=0)  # question + answer tokens (student); the teacher adds the document
    max_new_tokens: int = num(12, gt=0)
    eval_at_end: bool = True  # held-out evaluation after training (summary.json["eval"])
    eval_batch_size: int = num(16, gt=0)


def target_layers(cfg: DictConfig) -> list[int]:
    n = int(cfg.model.arch.num_hidden_layers)
    return list(range(n)) if cfg.algo.layers is None else sorted(int(i) for i in cfg.algo.layers)


def encoder_depth(cfg: DictConfig) -> int:
    """How many base layers the context encoder runs."""
    if cfg.algo.encoder.early_exit_layer is not None:
        return int(cfg.algo.encoder.early_exit_layer)
    return max(target_layers(cfg)) + 1


def num_queries(cfg: DictConfig) -> int:
    algo = cfg.algo
    return len(target_layers(cfg)) * len(algo.target_modules) * (algo.rank if algo.per_rank_gen else 1)


def _expert_target(cfg: DictConfig, name: str) -> str | None:
    """The MoE expert parameter `name` would target (experts are batched `nn.Parameter`s, not linear layers)."""
    if not (cfg.model.family == "gpt_oss" or cfg.model.arch.get("num_local_experts")):
        return None
    experts = [str(p) for p in cfg.model.lora.expert_parameters]
    for path in experts:
        if name in (path, path.rsplit(".", 1)[-1]) or path.endswith("." + name):
            return path
    if "experts" in name.split("."):
        return experts[0].rsplit(".", 1)[0] if experts else name
    return None


def _check_targets(cfg: DictConfig) -> None:
    """Generated LoRA wraps linear layers only: a MoE's experts are refused here, before any weight loads."""
    if cfg.model.lora.experts:
        raise ConfigError(
            "model.lora.experts=true with algo=d2l: D2L does not use model.lora (it generates LoRA "
            "for the linear layers in algo.target_modules) and cannot target MoE experts"
        )
    for name in cfg.algo.target_modules:
        path = _expert_target(cfg, str(name))
        if path is not None:
            raise ConfigError(
                f"algo.target_modules: {name} is a MoE expert weight ({path}: one batched parameter for all experts, "
                f"not a linear layer); D2L generates LoRA for linear layers only (e.g. q_proj, k_proj, v_proj, o_proj)"
            )


def validate_d2l(cfg: DictConfig) -> None:
    algo, agg = cfg.algo, cfg.algo.aggregator
    n_layers = int(cfg.model.arch.num_hidden_layers)
    if algo.ce_coef == 0 and algo.kl_coef == 0:
        raise ConfigError("algo.ce_coef and algo.kl_coef are both 0: nothing to train on")
    if agg.latent_size % agg.num_heads:
        raise ConfigError(
            f"algo.aggregator.latent_size={agg.latent_size} must be divisible by num_heads={agg.num_heads}"
        )
    if not algo.target_modules:
        raise ConfigError("algo.target_modules is empty: name at least one linear layer (e.g. [q_proj])")
    _check_targets(cfg)
    layers = target_layers(cfg)
    if not layers or min(layers) < 0 or max(layers) >= n_layers or len(set(layers)) != len(layers):
        raise ConfigError(f"algo.layers={list(layers)} must be distinct layer indices in [0, {n_layers})")
    depth = encoder_depth(cfg)
    if not 1 <= depth <= n_layers:
        raise ConfigError(f"algo.encoder.early_exit_layer={depth} must be in [1, {n_layers}]")
    if algo.per_layer_processing and depth < max(layers) + 1:
        raise ConfigError(
            f"algo.per_layer_processing=true reads layer {max(layers)}'s activations but "
            f"algo.encoder.early_exit_layer={depth} stops before it (raise it, or set per_layer_processing=false)"
        )
    expected = num_queries(cfg)
    if agg.num_queries is not None and agg.num_queries != expected:
        per = "(layer, module, rank)" if algo.per_rank_gen else "(layer, module)"
        raise ConfigError(
            f"algo.aggregator.num_queries={agg.num_queries} but per_rank_gen={algo.per_rank_gen} needs one latent per "
            f"{per} = {expected} (set it to {expected} or null)"
        )
    if not str(cfg.data.name).startswith("d2l"):
        raise ConfigError(
            f"algo=d2l needs a document QA data set (data=d2l_synth or data=d2l_squad), got data={cfg.data.name}"
        )
