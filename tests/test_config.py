"""Config tree: schemas catch typos/bad types/unknown choices at compose time, in one line, non-zero exit."""

from __future__ import annotations

import pytest

from posttrain.config.compose import load_config
from posttrain.config.validate import ConfigError
from tests.conftest import ROOT, run_train

CONF = ROOT / "conf"


def test_default_composes_to_tiny_grpo_cpu():
    cfg = load_config([])
    assert (cfg.model.name, cfg.algo.name, cfg.hw.name, cfg.data.name) == ("tiny_llama", "grpo", "cpu", "length")
    assert cfg.seed == 0 and cfg.mode == "train" and cfg.resume is None


@pytest.mark.parametrize(
    "override, needle",
    [
        ("model=no_such_model", "model/no_such_model"),
        ("trainer.lr=abc", "trainer.lr"),
        ("algo.betaa=1", "betaa"),
        ("trainer.max_stepz=3", "max_stepz"),
        ("trainer.lr=-1", "trainer.lr"),
        ("kernels=nope", "kernels/nope"),
        ("algo.trl.loss_type=ppo", "algo.trl.loss_type"),
        ("trainer.per_device_batch_size=6", "num_generations"),
        ("algo.kl.estimator=k9", "algo.kl.estimator"),  # k2 trains: hw=cpu picks the fused kernel
    ],
)
def test_bad_config_is_one_clear_line(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize(
    "override, needle", [("model=no_such_model", "no_such_model"), ("trainer.lr=abc", "trainer.lr")]
)
def test_cli_exits_nonzero_with_one_line(override, needle, tmp_path):
    proc = run_train(override, f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and needle in lines[0]
    assert not (tmp_path / "run").exists()


def test_every_config_file_starts_with_a_command_comment():
    for path in CONF.rglob("*.yaml"):
        head = [ln for ln in path.read_text().splitlines()[:2] if not ln.startswith("# @package")]
        assert head and head[0].startswith("# ") and "python " in head[0], path


def test_every_algo_file_declares_its_schema():
    for path in (CONF / "algo").glob("*.yaml"):
        assert f"/schema/algo/{path.stem}@_here_" in path.read_text(), path


def test_all_models_compose_offline():
    """Every model composes offline with its family's tokenizer vocabulary (the tiny ones: a small test vocabulary)."""
    vocab = {"gpt_oss": 201088, "llama3": 128256, "smollm2": 49152, "tiny": 320}
    for path in (CONF / "model").glob("*.yaml"):
        cfg = load_config([f"model={path.stem}"])
        (family,) = [f for f in vocab if path.stem.startswith(f)]
        assert cfg.model.arch.vocab_size == vocab[family], path.stem


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key != "defaults":
                yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), node


def test_a_default_lives_in_one_place():
    """Schema dataclasses hold the defaults. The algo and trainer files set nothing; no other group file repeats a
    schema default (a value equal to the default is a second copy that drifts)."""
    import dataclasses

    import yaml
    from omegaconf import OmegaConf

    from posttrain.algos.registry import algorithms
    from posttrain.config.schema import DataConfig, HwConfig, LoggerConfig, ModelConfig

    for path in [*(CONF / "algo").glob("*.yaml"), CONF / "trainer" / "default.yaml"]:
        assert not [k for k in (yaml.safe_load(path.read_text()) or {}) if k != "defaults"], path
    schemas = {"model": ModelConfig, "hw": HwConfig, "data": DataConfig, "logger": LoggerConfig}
    for group, schema in schemas.items():
        defaults = OmegaConf.to_container(OmegaConf.structured(schema))
        for path in (CONF / group).glob("*.yaml"):
            data = yaml.safe_load(path.read_text()) or {}
            data = data.get(group, data) if "# @package _global_" in path.read_text() else data
            flat_defaults = dict(_leaves(defaults))
            repeated = [
                k
                for k, v in _leaves(data)
                if k in flat_defaults and flat_defaults[k] == v and flat_defaults[k] != "???" and k != "name"
            ]
            assert not repeated, f"{path.relative_to(ROOT)} repeats schema defaults: {repeated}"
    for name, algorithm in algorithms().items():  # every algo schema field has a default (composes without a file)
        missing = [
            f.name
            for f in dataclasses.fields(algorithm.schema)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        assert not missing, (name, missing)


def test_a_plus_key_the_schema_lacks_is_refused_with_the_closest_name():
    """`+trainer.max_step=3` used to train the default 30 steps: Hydra adds any `+` key unchecked."""
    with pytest.raises(
        ConfigError, match=r"^\+trainer\.max_step: trainer has no key 'max_step' \(did you mean trainer\.max_steps\?\)$"
    ):
        load_config(["+trainer.max_step=3"])
    with pytest.raises(
        ConfigError, match=r"^\+algo\.kl\.targt: algo\.kl has no key 'targt' \(did you mean algo\.kl\.target\?\)"
    ):
        load_config(["+algo.kl.targt=0.1"])
    cfg = load_config(["+model.arch.mlp_bias=true", "+data.params.extra=1"])  # free dicts take new keys
    assert cfg.model.arch.mlp_bias is True and cfg.data.params.extra == 1
    with pytest.raises(ConfigError, match=r"^model\.arch\.rope_scaling_x: LlamaConfig has no such field"):
        load_config(["+model.arch.rope_scaling_x=2"])  # ... which the family's config class checks


def test_the_data_schema_holds_no_algorithm_field():
    """GRPO's rewards and held-out scoring are the algorithm's (`algo.rewards`, `algo.heldout`), set by each GRPO
    task file; the data schema knows no algorithm, and no algorithm schema repeats a data field."""
    from dataclasses import fields

    from posttrain.algos.registry import algorithms
    from posttrain.config.schema import DataConfig

    data_fields = {f.name for f in fields(DataConfig)}
    assert not data_fields & {"rewards", "heldout", "heldout_batch_size"}
    for name, algo in algorithms().items():
        assert not (data_fields - {"name", "seed"}) & {f.name for f in fields(algo.schema)}, name
    cfg = load_config(["data=add"])
    assert cfg.algo.heldout == 200 and cfg.algo.rewards[0]["name"] == "math"
