"""D2L shape rules are checked from the config, before any model loads, in one line."""

from __future__ import annotations

import pytest

from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError

BASE = ["algo=d2l", "data=d2l_synth"]


def test_d2l_composes_with_derived_queries():
    from posttrain.algos.d2l.config import encoder_depth, num_queries

    cfg = load_config(BASE)
    assert cfg.algo.name == "d2l" and cfg.data.name == "d2l_synth"
    assert cfg.model.init_eos_prob is None  # the length probe's EOS prior never leaks into D2L data
    # tiny_llama: 2 layers x 4 attention modules x rank 4
    assert num_queries(cfg) == 2 * 4 * 4 and encoder_depth(cfg) == 2
    cfg = load_config(BASE + ["algo.per_rank_gen=false", "algo.aggregator.num_queries=8"])
    assert num_queries(cfg) == 8


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["algo.aggregator.num_queries=7"], "num_queries=7"),
        (["algo.per_rank_gen=false", "algo.aggregator.num_queries=32"], "per_rank_gen=False"),
        (["algo.encoder.early_exit_layer=1"], "per_layer_processing"),
        (["algo.layers=[0,5]"], "algo.layers"),
        (["algo.rank=0"], "algo.rank"),
        (["algo.aggregator.latent_size=30"], "divisible"),
        (["algo.target_modules=[]"], "target_modules"),
        (["algo.ce_coef=0"], "nothing to train"),
        (["data=length"], "data=d2l_synth"),
        (["algo.encoder.early_exit_layer=9", "algo.per_layer_processing=false"], "early_exit_layer=9"),
        (["algo.encoder.max_chunks=0"], "algo.encoder.max_chunks"),
        (["algo.encoder.chunking=words"], "algo.encoder.chunking=words is not one of tokens, sentences"),
        (["algo.eval_distractors=true"], "algo.eval_distractors needs data=d2l_facts"),
        (["data=d2l_facts", "++data.params.reply=answer", "algo.eval_distractors=true"], "data.params.reply=sentence"),
    ],
)
def test_bad_shapes_fail_at_compose(overrides, needle):
    args = [a for a in BASE if not (a.startswith("data=") and any(o.startswith("data=") for o in overrides))]
    with pytest.raises(ConfigError) as err:
        load_config(args + overrides)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["model=tiny_gpt_oss", "algo.target_modules=[q_proj,gate_up_proj]"], "gate_up_proj is a MoE expert weight"),
        (["model=tiny_gpt_oss", "algo.target_modules=[mlp.experts.down_proj]"], "MoE expert weight"),
        (["model=tiny_gpt_oss", "algo.target_modules=[experts]"], "MoE expert weight"),
        (["model=gpt_oss", "algo.target_modules=[down_proj]"], "down_proj is a MoE expert weight"),  # no 20B load
        (["model=gpt_oss", "model.lora.experts=true"], "model.lora.experts=true"),
    ],
)
def test_experts_as_d2l_targets_fail_at_compose(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(BASE + overrides)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_dense_mlp_projections_stay_valid_targets():
    cfg = load_config(BASE + ["algo.target_modules=[q_proj,down_proj]"])  # Llama's MLP: nn.Linear layers
    assert list(cfg.algo.target_modules) == ["q_proj", "down_proj"]


def test_early_exit_is_allowed_without_per_layer_processing():
    cfg = load_config(BASE + ["algo.encoder.early_exit_layer=1", "algo.per_layer_processing=false"])
    assert cfg.algo.encoder.early_exit_layer == 1


def test_algo_d2l_defaults_to_synthetic_documents():
    # conf/algo/d2l.yaml sets the default data through the global package; that only wins when conf/config.yaml
    # lists `data` before `algo` in its defaults (Hydra applies them in order)
    assert load_config(["algo=d2l"]).data.name == "d2l_synth"
    assert load_config(["algo=d2l", "data=d2l_squad"]).data.name == "d2l_squad"  # an explicit data= still wins
