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
    # tokens: chunks of max_doc_length consecutive tokens; sentences: one chunk per sentence (a longer sentence goes
    # on in the next chunk), so that a chunk's LoRA comes from one statement (`posttrain.data.d2l.document_chunks`).
    # From scratch on 3-fact documents it learned no sooner than tokens; after a stage on one-fact documents
    # (algo.init_hypernet) it gives each chunk one fact, as in that stage (experiments/d2l_smollm2/LOG.md)
    chunking: str = "tokens"


@dataclass
class D2LAggregatorConfig:
    num_blocks: int = num(2, gt=0)
    latent_size: int = num(64, gt=0)  # a multiple of num_heads (validate_d2l)
    num_heads: int = num(4, gt=0)
    # null: derived (layers * modules * (rank if per_rank_gen else 1)); when set it must equal that number.
    num_queries: int | None = num(None, gt=0)
    mlp_ratio: int = num(2, gt=0)


# Evaluation conditions (`posttrain.algos.d2l.evaluate`), in the order they are computed and reported.
LOCALITY_SPANS = ("reply", "answer")  # algo.locality_span (posttrain.algos.d2l.locality)
EVAL_CONDITIONS = (
    "no_context",  # the base model, question only
    "in_context",  # the document (as D2L reads it) in the prompt; skipped where it exceeds the model's positions
    "in_context_truncated",  # the document cut to algo.context_window
    "in_context_instructed",  # in_context after an instruction to read the document and answer (named only)
    "retrieval_bm25",  # the document's best BM25 sentences for the question, filling algo.context_window (named only)
    "d2l",  # the LoRA generated from the question's document
    "d2l_other_doc",  # the LoRA of another held-out document, same question
    "d2l_other_entity",  # the question's document's LoRA, asked about another document's entity (needs kinds)
    "in_context_other_entity",  # the question's document in the prompt, asked about another document's entity
    "format_lora",  # a PEFT LoRA trained on the training questions' replies, no document (baselines.format_lora_*)
    "cd",  # per-document context distillation into a fresh PEFT LoRA (baselines.cd_*)
)
OPT_IN_CONDITIONS = ("in_context_instructed", "retrieval_bm25")  # not in a null eval_conditions' default
CD_PROBES = ("questions", "probes")


@dataclass
class D2LBaselinesConfig:
    """Adapter baselines evaluated beside D2L (end of training and mode=eval): PEFT LoRAs with the generated LoRA's
    rank, alpha, modules and layers (`posttrain.algos.d2l.baselines`)."""

    # Format-only LoRA: one LoRA trained with CE on the training questions' replies (the records and reply format
    # D2L trains on) with no document anywhere, then asked the held-out questions: what an adapter learns from the
    # QA format and the answer distribution alone. 0 steps: not evaluated.
    format_lora_steps: int = num(0, ge=0)
    format_lora_lr: float = num(1e-3, gt=0)
    format_lora_batch_size: int = num(8, gt=0)
    # Per-document context distillation (the D2L paper's CD baseline): for each held-out document a fresh LoRA is
    # trained for cd_steps full-batch AdamW steps (lr cosine-annealed to 0) to match the top-k distribution of the
    # base model reading the document in context (cut to algo.context_window) over its own greedy answers to the
    # probe questions. 0 steps: not evaluated (the paper: 300 steps, lr 1e-4, top-16).
    cd_steps: int = num(0, ge=0)
    cd_lr: float = num(1e-4, gt=0)
    cd_top_k: int = num(16, gt=0)
    # questions: the document's evaluated questions (the paper's oracle CD: the test queries, answered by the
    # teacher, never by the gold answers); probes: the record's paraphrased probe questions (data=d2l_facts)
    cd_probes: str = "questions"
    cd_max_docs: int = num(0, ge=0)  # CD on the first N held-out documents only (its cost); 0: every document


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
    # >0: locality (posttrain.algos.d2l.locality): with a document's LoRA, a question of the same kind about another
    # document's entity keeps the base model's reply distribution (KL); needs questions with kinds (data=d2l_facts)
    locality_coef: float = num(0.0, ge=0)
    # where that KL is taken: the paired question's whole reply, or its answer's tokens only (where a wrong value
    # shows; the first CPU probe found the reply's form kept either way: experiments/d2l_smollm2/LOG.md)
    locality_span: str = "reply"
    # A D2L checkpoint (or a hypernet directory of gpu_scale.py) whose hypernet weights training starts from, its
    # config equal to this run's; the optimizer, schedule and step start afresh (a curriculum: one-fact documents,
    # then several). `resume` instead continues a run where it stopped.
    init_hypernet: str | None = local_path(None, kind="dir", noun="hypernet checkpoint directory")
    max_length: int = num(128, gt=0)  # question + answer tokens (student); the teacher adds the document
    max_new_tokens: int = num(12, gt=0)
    eval_at_end: bool = True  # held-out evaluation after training (summary.json["eval"])
    # Every monitor_steps steps (0: never): the answer CE of the first monitor_docs held-out and training documents'
    # questions with their own document's LoRA and with another's, and the gap (posttrain.algos.d2l.monitor): a gap
    # on training documents with none on held-out ones is memorisation
    monitor_steps: int = num(0, ge=0)
    monitor_docs: int = num(16, ge=2)
    eval_batch_size: int = num(16, gt=0)
    # Which EVAL_CONDITIONS to evaluate; null: every one that applies (format_lora and cd when their steps are set,
    # d2l_other_entity and in_context_other_entity when the questions have kinds), less the baselines evaluated only
    # when named (OPT_IN_CONDITIONS: in_context_instructed, retrieval_bm25).
    eval_conditions: list[str] | None = None
    # Held-out documents also state their questions' pairs' facts (the same kind of fact about another document's
    # entity, `binding.with_distractors`): a binding test that the base model reading the document can pass. Needs
    # data=d2l_facts with data.params.reply=sentence.
    eval_distractors: bool = False
    # Tokens the base model is granted for document + question + answer in the truncated in-context baseline (and
    # the CD teacher); null: the model's max_position_embeddings. On CPU an experiment grants a small window (e.g.
    # 512) so that documents of 8x the window stay cheap; D2L reads any document in chunks of
    # encoder.max_doc_length tokens (up to encoder.max_chunks).
    context_window: int | None = num(None, gt=0)
    baselines: D2LBaselinesConfig = field(default_factory=D2LBaselinesConfig)


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
    if cfg.model.lora.loraplus_lr_ratio is not None:
        raise ConfigError(
            "model.lora.loraplus_lr_ratio with algo=d2l: D2L does not use model.lora (it trains a hypernetwork "
            "that generates LoRA), so there are no LoRA B matrices to give a larger learning rate"
        )
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
    if "zero3" in str(cfg.hw.accelerate_config or "") and cfg.hw.num_devices > 1:
        raise ConfigError(
            f"algo=d2l does not train under hw.accelerate_config={cfg.hw.accelerate_config}: the generated LoRA "
            "reads the frozen base weights outside their layers' forward, after ZeRO-3 has released them; "
            "hw.accelerate_config=fsdp2 shards the same state, deepspeed_zero2 all but the weights"
        )
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
            f"algo=d2l needs a document QA data set (data=d2l_synth, d2l_facts, d2l_squad, d2l_drop or d2l_ropes), "
            f"got data={cfg.data.name}"
        )
    _check_eval(cfg)
    if algo.monitor_steps and min(int(cfg.data.num_eval or 0), int(cfg.data.num_train or 0)) < 2:
        raise ConfigError(
            f"algo.monitor_steps={algo.monitor_steps} compares a document's LoRA with another's: it needs "
            f"data.num_train and data.num_eval >= 2 (got {cfg.data.num_train} and {cfg.data.num_eval})"
        )


def context_window(cfg: DictConfig) -> int:
    """The tokens the truncated in-context baseline may use: `algo.context_window`, else the model's positions."""
    window = cfg.algo.context_window
    return int(window) if window is not None else int(cfg.model.arch.max_position_embeddings)


def _check_eval(cfg: DictConfig) -> None:
    algo, params = cfg.algo, cfg.data.params
    unknown = [c for c in algo.eval_conditions or () if c not in EVAL_CONDITIONS]
    if unknown:
        raise ConfigError(f"algo.eval_conditions: {unknown[0]} is not one of {', '.join(EVAL_CONDITIONS)}")
    steps = {"format_lora": algo.baselines.format_lora_steps, "cd": algo.baselines.cd_steps}
    for cond, n in steps.items():
        if cond in (algo.eval_conditions or ()) and not n:
            raise ConfigError(f"algo.eval_conditions names {cond} but algo.baselines.{cond}_steps=0 (nothing to train)")
    from posttrain.data.d2l import CHUNKINGS

    if algo.encoder.chunking not in CHUNKINGS:
        raise ConfigError(f"algo.encoder.chunking={algo.encoder.chunking} is not one of {', '.join(CHUNKINGS)}")
    positions = int(cfg.model.arch.max_position_embeddings)
    if context_window(cfg) > positions:
        raise ConfigError(f"algo.context_window={algo.context_window} exceeds the model's {positions} positions")
    if algo.baselines.cd_probes not in CD_PROBES:
        raise ConfigError(f"algo.baselines.cd_probes={algo.baselines.cd_probes} is not one of {', '.join(CD_PROBES)}")
    if algo.baselines.cd_probes == "probes" and algo.baselines.cd_steps and cfg.data.name != "d2l_facts":
        raise ConfigError("algo.baselines.cd_probes=probes needs records with probe questions (data=d2l_facts)")
    if algo.locality_span not in LOCALITY_SPANS:
        raise ConfigError(f"algo.locality_span={algo.locality_span} is not one of {', '.join(LOCALITY_SPANS)}")
    if algo.locality_coef and cfg.data.name != "d2l_facts":
        raise ConfigError("algo.locality_coef > 0 needs questions with kinds, to pair across entities (data=d2l_facts)")
    if algo.eval_distractors and (cfg.data.name != "d2l_facts" or params.get("reply") != "sentence"):
        raise ConfigError("algo.eval_distractors needs data=d2l_facts with data.params.reply=sentence")
    if cfg.data.name == "d2l_facts" and cfg.data.source == "generator":
        from posttrain.data.d2l.facts import facts_problems

        problems = facts_problems(params)
        if problems:
            raise ConfigError(problems[0])
        reads = int(algo.encoder.max_doc_length) * int(algo.encoder.max_chunks)
        for key in ("train_doc_tokens", "eval_doc_tokens"):
            if int(params.get(key, 0)) > reads:
                raise ConfigError(
                    f"data.params.{key}={params[key]} exceeds what D2L reads (algo.encoder.max_doc_length "
                    f"{algo.encoder.max_doc_length} x max_chunks {algo.encoder.max_chunks} = {reads} tokens): "
                    "raise algo.encoder.max_chunks"
                )
