"""`algo=d2l`: Doc-to-LoRA — a hypernetwork reads a document and emits LoRA weights for a frozen base model.

    python train.py algo=d2l model=tiny_llama trainer.max_steps=300

Python API (`posttrain.algos.d2l.api`, re-exported here lazily): `load_d2l(cfg, checkpoint)` -> `D2LModel` with
`internalize(doc) -> lora`, `generate(prompt, lora)`, `reset()`; `build_model(cfg)` for a fresh one.

This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Algorithm, ModelCopy, Workload
from posttrain.algos.d2l.config import D2LAlgoConfig, validate_d2l

__all__ = ["ALGORITHM", "D2LAlgoConfig", "D2LModel", "GeneratedLoRA", "build_model", "load_d2l"]
_API = ("D2LModel", "GeneratedLoRA", "build_model", "load_d2l")


class D2L(Algorithm):
    name = "d2l"
    schema = D2LAlgoConfig
    console = {
        "show": {
            "loss": "loss",
            "ce_loss": "ce",
            "kl_loss": "kl",
            "gen_lora_l1_norm": "|lora|",
            # the monitor's evaluations (algo.monitor_steps): other-document CE minus own-document CE
            "heldout_gap": "held-out gap",
            "train_gap": "train gap",
        },
        "trend": ("loss", "ce_loss", "kl_loss", "gen_lora_l1_norm", "grad_norm"),
        "plots": {"loss.png": ("loss", "ce_loss", "kl_loss")},
        # the held-out evaluation after training, one row per condition (eval.json has the intervals)
        "results": {"accuracy": r"^eval_(\w+?)_accuracy$", "answer CE": r"^eval_(\w+?)_answer_loss$"},
    }

    def validate(self, cfg: DictConfig) -> None:
        validate_d2l(cfg)

    def workload(self, cfg: DictConfig) -> Workload:
        """The base stays frozen; the generated LoRA on `algo.target_modules` keeps those layers' inputs for its
        gradient. The context encoder (a second copy of the base unless it shares the base's tensors) reads every
        document chunk with no grad; the hypernet upcasts the chunks' activations of the target layers to fp32
        (LayerNorm) and keeps that and its bf16 cast for the backward. The LM head forms fp32 logits only at answer
        positions (D2LModel.forward). Lengths: the data's longest question+answer, longest chunk and most chunks per
        document (measured with the run's tokenizer when at hand, else `algo.max_length`, `max_doc_length` x
        `max_chunks`). The hypernetwork (counted from the module itself) is what trains. With `algo.locality_coef` the
        other-entity view adds a grad forward of as many questions and the KL's fp32 tensors."""
        from posttrain.algos.d2l.config import encoder_depth, target_layers
        from posttrain.algos.d2l.model import hypernet_parameter_count
        from posttrain.hardware.tensor_bytes import act_bytes

        algo, batch = cfg.algo, int(cfg.trainer.per_device_batch_size)
        enc = algo.encoder
        measured = _longest_d2l(cfg)
        bounds = (int(algo.max_length), float(int(algo.max_length) - 1), int(enc.max_doc_length), int(enc.max_chunks))
        seq, answer, chunk, chunks = measured or bounds
        act, h = act_bytes(cfg), int(cfg.model.arch.hidden_size)
        depth = encoder_depth(cfg)
        layers = len(target_layers(cfg))
        read = layers if algo.per_layer_processing else 1  # encoder layers the hypernet reads
        elems = batch * chunks * chunk * h  # one layer's activations over every chunk of the batch
        hypernet = hypernet_parameter_count(cfg)
        # kept for the backward: the hypernet input's fp32 copy, LayerNorm's output and in_proj's bf16 cast; the
        # Perceiver blocks' tensors at latent width (over the chunks' tokens, and over the queries); the generated
        # A and B ([docs, layers, rank, d] per module: the head's output, its fp32 scaling (or the fp32 regrouping
        # of a document's chunks), the base's dtype copy D2LLinear multiplies by); the autocast cache of the
        # hypernet's own weights (coefficients measured on CPU: tests/hardware/test_plan_vs_measured.py)
        size = int(algo.aggregator.latent_size)
        queries = len(algo.target_modules) * (int(algo.rank) if algo.per_rank_gen else 1)
        over_chunks = batch * chunks * read * chunk * size
        over_queries = batch * chunks * read * queries * size
        blocks = int(algo.aggregator.num_blocks) * (over_chunks * 2 * act + over_queries * 24 * act)
        lora = batch * layers * int(algo.rank) * chunks * _lora_dims(cfg)
        kept = float(elems * read * (4 + 2 * act) + blocks + lora * (2 * act + 4) + (2 * hypernet if act < 4 else 0))
        forward = elems * max(2 * depth * act, depth * act + read * (2 * act + 8))  # stacked outputs, then copies
        vocab = int(cfg.model.arch.vocab_size)
        if float(algo.kl_coef) > 0:  # the top-k KL's log-softmax of the tempered logits
            kept += 8 * batch * answer * vocab
        # the locality term's other-entity view (locality.py): a second grad forward through the LoRA'd model on
        # training questions of the same kind, counted as `batch` more rows of the same lengths (span=answer labels
        # fewer tokens: an upper bound). At the loss's backward its positions hold five fp32 [n, V] (measured on
        # CPU): the view's logits, log-softmax, the base's logits and probabilities, the log-ratio; the rows count 3
        locality = float(algo.locality_coef) > 0
        rows = 2 * batch if locality else batch
        if locality:
            kept += 8 * batch * answer * vocab
        lengths = f"longest of data={cfg.data.name}" if measured else "config bounds"
        view = f" + {batch} other-entity questions (locality)" if locality else ""
        return Workload(
            seqs=rows,
            seq_len=seq,
            logit_tokens=answer,
            note=f"{batch} queries of {seq} tokens{view} + {batch * chunks} document chunks of {chunk} tokens "
            f"({lengths}), {answer:.3g} answer tokens each",
            train_mode="frozen",
            loss_backend="materialized",
            adapted_modules=tuple(algo.target_modules),
            copies=() if enc.share_weights else (ModelCopy("context encoder", "frozen copy of the base"),),
            extra_kept_bytes=kept,
            extra_forward_bytes=forward,
            extra_note="hypernet input",
            extra_trainable=hypernet,
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.d2l.api import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        from posttrain.algos.d2l.api import summarize

        return summarize(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.d2l.api import evaluate

        return evaluate(cfg, run_dir, checkpoint)


def _lora_dims(cfg: DictConfig) -> int:
    """Sum over `algo.target_modules` of d_in + d_out (Llama/GPT-OSS attention and MLP projections)."""
    a = cfg.model.arch
    h, inter = int(a.hidden_size), int(a.intermediate_size)
    hd = int(a.get("head_dim") or h // int(a.num_attention_heads))
    q, kv = int(a.num_attention_heads) * hd, int(a.num_key_value_heads) * hd
    dims = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h}
    dims.update({"gate_proj": h + inter, "up_proj": h + inter, "down_proj": inter + h})
    return sum(dims.get(str(m), 2 * h) for m in cfg.algo.target_modules)


def _longest_d2l(cfg: DictConfig) -> tuple[int, float, int, int] | None:
    """(longest question+answer, answer tokens per example (their mean: what a batch's answers add up to), longest
    document chunk, most chunks of a document) of the training data, or None when the run's tokenizer or data is
    not at hand (`posttrain.hardware.lengths`)."""
    from posttrain.errors import UserError
    from posttrain.hardware.lengths import measured

    def measure(tokenizer) -> tuple[int, float, int, int]:
        from posttrain.data.d2l import d2l_records, featurize_all

        algo, enc = cfg.algo, cfg.algo.encoder
        records, _ = d2l_records(cfg.data, tokenizer)
        rows = featurize_all(records, tokenizer, algo.max_length, enc.max_doc_length, enc.max_chunks, enc.chunking)
        chunks = [r.get("ctx_chunks") or [r["ctx_ids"]] for r in rows]
        return (
            max(len(r["input_ids"]) for r in rows),
            sum(sum(label != -100 for label in r["labels"][1:]) for r in rows) / len(rows),
            max(len(c) for doc in chunks for c in doc),
            max(len(doc) for doc in chunks),
        )

    try:
        return measured(cfg, ("algo.max_length", "algo.encoder"), measure)
    except UserError:  # data the run would refuse: planned with the bounds, the run reports the data error
        return None


ALGORITHM = D2L()


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module("posttrain.algos.d2l.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
