"""`algo=contrastive`: LoRA + projection head trained on (benign, counterfactual, injected) triplets.

    python train.py algo=contrastive data=contrastive_injection model=tiny_llama          # train
    python train.py algo=contrastive mode=eval hydra.run.dir=<run>                       # score a run

Python API (`posttrain.algos.contrastive.api`, re-exported lazily): `build_model(cfg)` -> `ContrastiveModel`
(base + LoRA + head, its tokenizer as `.tokenizer`); `evaluate_model(cfg, model)` in `.evaluate`.
This file is the algorithm's entry in the registry and stays light (no torch): composing a config imports it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.algos.base import Algorithm, Workload
from posttrain.algos.contrastive.config import ContrastiveAlgoConfig, validate_contrastive

__all__ = ["ALGORITHM", "ContrastiveAlgoConfig", "build_model"]


class Contrastive(Algorithm):
    name = "contrastive"
    schema = ContrastiveAlgoConfig
    console = {
        "show": {"loss": "loss", "inv": "inv", "kl": "kl", "lm_loss": "lm", "nce": "nce", "sim_inj_benign": "sim_ib"},
        "trend": ("loss", "inv", "kl", "lm_loss", "nce", "sim_inj_benign", "sim_inj_exec"),
        "plots": {
            "loss.png": ("loss", "inv", "kl", "lm_loss", "nce"),
            "similarity.png": ("sim_inj_benign", "sim_inj_exec"),
        },
    }

    def validate(self, cfg: DictConfig) -> None:
        validate_contrastive(cfg)

    def workload(self, cfg: DictConfig) -> Workload:
        """One forward of every example's row blocks (benign, counterfactual, injected, and the executed injection
        when the invariance term is on: `config.uses_executed_rows`), right-padded to the batch's longest member (the
        data's longest, measured with the run's tokenizer when at hand; `algo.max_length` with `pad_to_max_length`
        or without a tokenizer). Logits are formed only at the answer positions of the blocks a term reads
        (`terms.loss_terms`: the LM blocks, benign and injected for the consistency KL), in fp32, plus the LM loss's
        concatenation and the consistency term's two log-softmaxes; the representation term forms none (the pooled
        states: an fp32 copy of the last hidden states and, in the backward, its fp32 gradient). The projection
        head (counted from the module) trains too. `algo.preference=dpo` (TRL's DPOTrainer) is planned as these
        blocks."""
        from posttrain.algos.contrastive.config import uses_executed_rows
        from posttrain.algos.contrastive.model import head_parameter_count
        from posttrain.hardware.tensor_bytes import act_bytes

        algo, batch = cfg.algo, int(cfg.trainer.per_device_batch_size)
        blocks = 4 if uses_executed_rows(algo) else 3
        roles = ("benign", "counterfactual", "injected", "executed")[:blocks]
        lm = {0, 2} if algo.lm_on_injected else {0}
        lm = (lm | ({1} if algo.lm_on_counterfactual else set())) if float(algo.lm_weight) > 0 else set()
        consistency = {0, 2} if float(algo.consistency_weight) > 0 else set()
        logit_blocks = len(lm | consistency)
        measured = None if algo.pad_to_max_length else _longest_member(cfg, roles)
        if measured:
            seq, answers = measured
            answer = sum(answers[roles[i]] for i in lm | consistency) / max(logit_blocks, 1)
        else:
            seq, answer = int(algo.max_length), int(algo.max_length) - 1
        rows = batch * blocks
        hidden = rows * seq * int(cfg.model.arch.hidden_size)
        # beyond each block's fp32 logits and log-softmax (the plan's materialized head): the consistency term's
        # two fp32 log-softmaxes and KL temporaries, three more block-sized fp32 tensors at the forward's end
        # (measured on CPU: tests/hardware/test_plan_vs_measured.py)
        per_logit = batch * answer * int(cfg.model.arch.vocab_size) * 4
        extra_logits = per_logit * (3 if consistency else 0)
        lengths = f"longest of data={cfg.data.name}" if measured else "algo.max_length"
        return Workload(
            seqs=rows,
            seq_len=seq,
            logit_rows=batch * logit_blocks,
            logit_tokens=answer if logit_blocks else 0,
            note=f"{batch} examples x {blocks} row blocks ({', '.join(roles)}); {seq} tokens ({lengths}), "
            f"{answer:.3g} answer tokens per row",
            train_mode="lora",
            loss_backend="materialized",
            extra_top_bytes=hidden * (4 + act_bytes(cfg)) + extra_logits,  # pooled states' fp32 gradient, its cast
            extra_note="pooled states, loss terms",
            extra_trainable=head_parameter_count(cfg),
        )

    def build_trainer(self, cfg: DictConfig, run_dir: Path, callbacks: list) -> Any:
        from posttrain.algos.contrastive.api import build_trainer

        return build_trainer(cfg, run_dir, callbacks)

    def summarize(self, cfg: DictConfig, trainer: Any, run_dir: Path) -> dict[str, Any]:
        from posttrain.algos.contrastive.api import summarize

        return summarize(cfg, trainer, run_dir)

    def evaluate(self, cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
        from posttrain.algos.contrastive.evaluate import evaluate_checkpoint

        return evaluate_checkpoint(cfg, checkpoint, run_dir)


def _longest_member(cfg: DictConfig, roles: tuple[str, ...]) -> tuple[int, dict[str, float]] | None:
    """(tokens of the data's longest member of `roles`, answer tokens per member of each role: their mean, which is
    what a batch's answers add up to), or None when the run's tokenizer or data is not at hand
    (`posttrain.hardware.lengths`)."""
    from posttrain.errors import UserError
    from posttrain.hardware.lengths import measured

    def measure(tokenizer) -> tuple[int, dict[str, float]]:
        from posttrain.data.contrastive import TripletDataset, build_triplets, layout_of

        algo = cfg.algo
        injected_target = cfg.data.params.get("injected_target", "answer")
        rows = build_triplets(cfg.data, "train")
        data = TripletDataset(
            rows, tokenizer, algo.max_length, algo.pool, injected_target, roles=roles, layout=layout_of(cfg.data)
        )
        longest = max(len(item[role]["input_ids"]) for item in data.items for role in roles)
        answers = {
            role: sum(sum(label != -100 for label in item[role]["labels"][1:]) for item in data.items) / len(data)
            for role in roles
        }
        return longest, answers

    try:
        return measured(cfg, ("algo.max_length", "algo.pool", "algo.contrastive_weight"), measure)
    except UserError:  # data the run would refuse: planned with the bounds, the run reports the data error
        return None


ALGORITHM = Contrastive()


def __getattr__(name: str) -> Any:
    if name == "build_model":
        return importlib.import_module("posttrain.algos.contrastive.model").build_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
