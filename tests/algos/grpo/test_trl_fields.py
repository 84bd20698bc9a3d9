"""`algo.trl`: GRPOConfig's own fields, read from TRL's source, passed through with TRL's names, types and defaults;
GRPOConfig's own checks as one `error:` line; the keys posttrain derives refused with the setting to use."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf
from transformers import TrainingArguments
from trl import GRPOConfig

from posttrain.algos.grpo.build import grpo_args
from posttrain.algos.grpo.trl_fields import POSTTRAIN_DEFAULTS, SET_BY_POSTTRAIN, grpo_config_fields, passed_through
from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError


def test_the_parse_of_trls_source_is_grpo_configs_fields():
    """Every field GRPOConfig adds to TrainingArguments, with the default the imported class has."""
    parsed = {f.name: f.default for f in grpo_config_fields()}
    real = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert set(real) - base <= set(parsed) <= set(real)
    assert {name: real[name] for name in parsed} == parsed
    assert len(passed_through()) >= 60 and set(SET_BY_POSTTRAIN) <= set(parsed)


def test_defaults_are_trls_but_the_three_posttrain_picks():
    cfg = load_config([])
    real = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    got = OmegaConf.to_container(cfg.algo.trl)
    assert set(got) == {f.name for f in passed_through()} and not set(got) & set(SET_BY_POSTTRAIN)
    differ = {name for name in got if got[name] != real[name]}
    assert differ == set(POSTTRAIN_DEFAULTS) == {"loss_type", "beta", "max_completion_length"}


@pytest.mark.parametrize(
    "override, field, value",
    [
        ("algo.trl.loss_type=luspo", "loss_type", "luspo"),
        ("algo.trl.epsilon_high=0.28", "epsilon_high", 0.28),
        ("algo.trl.steps_per_generation=2", "steps_per_generation", 2),
        ("algo.trl.temperature=0.7", "temperature", 0.7),
        ("algo.trl.use_bias_correction_kl=false", "use_bias_correction_kl", False),
        ("algo.trl.vllm_server_host=10.0.0.2", "vllm_server_host", "10.0.0.2"),  # a field posttrain never copied
        ("algo.trl.num_completions_to_print=3", "num_completions_to_print", 3),
    ],
)
def test_a_value_reaches_grpo_config(tmp_path, override, field, value):
    args = grpo_args(load_config([override]), tmp_path)
    assert getattr(args, field) == value


def test_grpo_configs_own_checks_are_one_line(tmp_path):
    cfg = load_config(["algo.trl.vllm_importance_sampling_clip_min=3", "algo.trl.vllm_importance_sampling_clip_max=2"])
    with pytest.raises(ConfigError) as err:
        grpo_args(cfg, tmp_path)
    line = str(err.value)
    assert line.startswith("algo.trl: TRL's GRPOConfig refuses") and "clip_min (3.0)" in line and "\n" not in line


@pytest.mark.parametrize(
    "override, line",
    [
        ("algo.trl.beta=abc", "algo.trl.beta: Value 'abc' of type 'str' could not be converted to Float"),
        ("algo.trl.beta=-1", "algo.trl.beta=-1.0 must be >= 0"),
        ("algo.trl.num_generations=1", "algo.trl.num_generations=1 must be >= 2"),
        ("algo.trl.betta=0", "(did you mean algo.trl.beta?)"),
        ("algo.beta=0", "(did you mean algo.trl.beta?)"),  # the key before TRL's fields moved under algo.trl
        ("algo.trl.use_vllm=true", "(posttrain sets it from algo.generation.backend=vllm)"),
        ("trainer.lrr=1e-3", "(did you mean trainer.lr?)"),
    ],
)
def test_bad_keys_and_values_fail_at_compose_in_one_line(override, line):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert line in str(err.value) and "\n" not in str(err.value), str(err.value)
