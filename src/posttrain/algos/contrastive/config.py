"""`algo=contrastive` schema (registered by name in posttrain.config.registry) and its cross-field rules.

The arms of experiments/contrastive_smollm2 are settings of this one schema:

    SFT (StruQ-style)       algo.contrastive_weight=0 algo.consistency_weight=0          (LM loss on injected rows)
    SFT + invariance        the defaults
    DPO (SecAlign-style)    algo.preference=dpo algo.lm_weight=0 algo.contrastive_weight=0 algo.consistency_weight=0
    DPO + invariance        algo.preference=dpo algo.lm_weight=0

The first experiment's detection objective (benign anchor, paraphrase positive, the injected version as hard
negative) was retired: superseded by invariance, and not run on the SecAlign-style data (experiments/contrastive_tiny).
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from posttrain.config.ranges import local_path, num
from posttrain.config.validate import ConfigError

PREFERENCES = ("none", "dpo")
POOLS = ("last", "prompt", "all")  # posttrain.data.contrastive.encode.POOLS (kept torch-free here)


@dataclass
class ContrastiveAlgoConfig:
    name: str = "contrastive"
    max_length: int = num(384, gt=0)  # tokens per triplet member (longer members are a DataError, never truncated)
    temperature: float = num(0.1, gt=0)  # InfoNCE temperature on cosine similarities
    # weight of the representation term, causal invariance (0: none): the injected prompt pulled to its benign version
    # and paraphrase, away from the injection executed as a trusted request (loss.invariance_nce)
    contrastive_weight: float = num(1.0, ge=0)
    # KL(benign prompt's answer distribution || injected prompt's) per answer token, the benign side detached
    consistency_weight: float = num(1.0, ge=0)
    lm_weight: float = num(1.0, ge=0)  # with preference=dpo: weight of TRL's `sft` loss on the chosen reply
    lm_on_counterfactual: bool = False  # LM loss on benign always, injected per lm_on_injected; paraphrase on request
    lm_on_injected: bool = True  # the StruQ-style term: the benign answer under injection; false: benign rows only
    in_batch_negatives: bool = True  # other examples' members are negatives too (else only the own hard negative)
    pool: str = "last"  # last prompt token (the state that generates the answer) | prompt (mean) | all (mean)
    layer: int = num(-1, note="an index into transformers' hidden_states: 0 embeddings, -1 after the final norm")
    train_head: bool = False  # false: a fixed random projection (only the LM's states can move the term)
    head_hidden_dim: int = num(256, ge=0, note="0: linear projection head")
    proj_dim: int = num(128, gt=0)
    # preference optimisation on (injected prompt, benign answer > the injected task's answer) with TRL's DPOTrainer
    preference: str = "none"  # none | dpo (SecAlign-style; the representation terms are added to DPO's loss)
    dpo_beta: float = num(0.1, gt=0)  # DPOConfig.beta
    pad_to_max_length: bool = False  # pre-pad in the dataset (static shapes); same rule as the collator
    # checkpoint dir whose adapters + head start this run (fresh optimizer)
    init_from: str | None = local_path(None, kind="dir", noun="checkpoint directory")
    # evaluation (greedy replies; mode=eval scores `eval.checkpoint`, "init" = base + algo.init_from)
    max_new_tokens: int = num(64, gt=0)
    ifeval_max_new_tokens: int = num(128, gt=0)  # replies to the IFEval-style prompts (data.params.num_ifeval)
    eval_batch_size: int = num(32, gt=0)
    eval_at_end: bool = True  # after training, score the final weights ("after") and the starting ones ("before")
    eval_start: bool = True  # false: "after" only (an experiment that scores the starting weights once, apart)


def uses_executed_rows(algo: DictConfig) -> bool:
    """Whether the batch carries the fourth block (the injection executed: the invariance term's hard negative)."""
    return float(algo.contrastive_weight) > 0


def validate_contrastive(cfg: DictConfig) -> None:
    algo = cfg.algo
    for key, allowed in (("preference", PREFERENCES), ("pool", POOLS)):
        if algo[key] not in allowed:
            raise ConfigError(f"algo.{key}={algo[key]!r} is not one of {', '.join(allowed)}")
    dpo = algo.preference == "dpo"
    if algo.contrastive_weight == 0 and algo.lm_weight == 0 and algo.consistency_weight == 0 and not dpo:
        raise ConfigError(
            "algo.contrastive_weight, algo.consistency_weight and algo.lm_weight are all 0: nothing to train"
        )
    if algo.pool != "last" and algo.contrastive_weight > 0:
        raise ConfigError(
            f"algo.contrastive_weight > 0 (invariance) compares the states that generate the answer: algo.pool must "
            f"be last, not {algo.pool} (a mean over prompt tokens includes the injection itself)"
        )
    target = cfg.data.params.get("injected_target", "answer")
    if algo.consistency_weight > 0 and target != "answer":
        raise ConfigError(
            "algo.consistency_weight > 0 compares the benign and injected prompts on the benign answer: "
            f"data.params.injected_target must be answer, not {target}"
        )
    layers = int(cfg.model.arch.num_hidden_layers)
    if not -(layers + 1) <= algo.layer <= layers:
        raise ConfigError(f"algo.layer={algo.layer} is outside the model's hidden states [-{layers + 1}, {layers}]")
    if dpo:
        if algo.train_head:
            raise ConfigError("algo.preference=dpo trains the adapters only: algo.train_head must be false")
        if algo.lm_on_counterfactual or not algo.lm_on_injected:
            raise ConfigError(
                "algo.preference=dpo: the LM term is TRL's sft loss on the chosen reply (the injected prompt's benign "
                "answer), weighted by algo.lm_weight; algo.lm_on_counterfactual / lm_on_injected do not apply"
            )
        if target != "answer":
            raise ConfigError(
                "algo.preference=dpo prefers the benign answer: data.params.injected_target must be answer"
            )
        if algo.init_from:
            raise ConfigError(
                "algo.preference=dpo starts from fresh adapters (its reference is the base): unset algo.init_from"
            )
    generator = cfg.data.params.get("generator", "triplets")
    if generator not in ("triplets", "secalign"):
        raise ConfigError(f"data.params.generator={generator!r} is not one of triplets, secalign")
    if generator == "secalign":
        from posttrain.data.contrastive.secalign import spec_from_params

        problems = spec_from_params(cfg.data.params).problems()
        if problems:
            raise ConfigError(f"data.params.{problems[0]}")
    for key, allowed in (
        ("eval_split", ("eval", "test")),
        ("ifeval_source", ("generated", "google")),
        ("layout", ("one_turn", "input_role")),  # posttrain.data.contrastive.encode.LAYOUTS (kept torch-free here)
    ):
        value = cfg.data.params.get(key, allowed[0])
        if value not in allowed:
            raise ConfigError(f"data.params.{key}={value!r} is not one of {', '.join(allowed)}")
    if cfg.data.params.get("eval_split", "eval") == "test" and generator != "secalign":
        raise ConfigError(
            "data.params.eval_split=test is the SecAlign generator's split: data.params.generator=secalign"
        )
    if cfg.data.params.get("eval_split", "eval") == "test" and "print" in (
        cfg.data.params.get("eval_injected_tasks") or ()
    ):
        raise ConfigError(
            "data.params.eval_injected_tasks: print's witness ('Hacked!') is in its own injection text, so an echo "
            "counts as success; on the test split use [capital,translate,sum]"
        )
    if cfg.data.params.get("ifeval_source") == "google" and int(cfg.data.params.get("num_ifeval", 0) or 0) > 541:
        raise ConfigError("data.params.num_ifeval: Google's IFEval has 541 prompts")
    if not cfg.model.lora.enabled:
        raise ConfigError("algo=contrastive trains LoRA adapters + a projection head: model.lora.enabled must be true")
