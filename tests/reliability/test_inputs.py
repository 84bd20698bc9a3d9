"""Inputs refused before anything is written: nan/inf in any numeric config field (one walk over every schema), data
files that are not UTF-8 or whose prompts are not text / chat messages / non-empty, run dirs that cannot be created.

The same classes run end to end as rows of experiments/reliability/cases.py (tests/reliability/test_bad_inputs.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posttrain.algos.registry import algorithms
from posttrain.config.compose import load_config
from posttrain.config.finite import check_finite, non_finite
from posttrain.config.schema import Config
from posttrain.config.validate import ConfigError
from posttrain.data.jsonl import check_data_file, prompt_problem, read_json, read_jsonl
from posttrain.errors import DataError
from posttrain.inputs import RunDirError, check_inputs, check_run_dir

ALGO_SCHEMAS = {name: algorithm.schema for name, algorithm in algorithms().items()}
ALGOS = {
    "grpo": ["algo=grpo"],
    "contrastive": ["algo=contrastive", "data=contrastive_injection"],
    "d2l": ["algo=d2l", "data=d2l_synth"],
}


# -- nan / inf in numeric config fields ------------------------------------------------------------------------------
def _float_fields(cls: type, prefix: str) -> list[str]:
    """Dotted keys of every float / Optional[float] field of a schema dataclass, nested dataclasses included."""
    out = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        args = set(typing.get_args(hint)) - {type(None)}
        if hint is float or args == {float}:
            out.append(f"{prefix}{f.name}")
        elif dataclasses.is_dataclass(hint):
            out += _float_fields(hint, f"{prefix}{f.name}.")
    return out


def _schema_floats(algo: str) -> list[str]:
    groups = {f.name: typing.get_type_hints(Config)[f.name] for f in dataclasses.fields(Config)}
    keys = [k for name, cls in groups.items() if dataclasses.is_dataclass(cls) for k in _float_fields(cls, f"{name}.")]
    return keys + _float_fields(ALGO_SCHEMAS[algo], "algo.")


def test_every_algorithm_schema_is_walked():
    assert set(ALGO_SCHEMAS) == set(ALGOS)
    for algo, needles in (
        ("grpo", ["algo.trl.beta", "algo.kl.target", "algo.trl.top_p"]),
        ("contrastive", ["algo.temperature"]),
        ("d2l", ["algo.alpha", "algo.kl_temperature"]),
    ):
        keys = _schema_floats(algo)
        assert {"trainer.lr", "trainer.max_grad_norm", "hw.device_gib", "model.lora.dropout"} <= set(keys)
        assert set(needles) <= set(keys), (algo, keys)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_defaults_are_finite(algo):
    assert non_finite(load_config(ALGOS[algo])) == []


@pytest.mark.parametrize("algo", sorted(ALGOS))
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_field_of_every_schema_refuses_non_finite(algo, value):
    base = load_config(ALGOS[algo])
    keys = _schema_floats(algo)
    for key in keys:
        cfg = base.copy()
        OmegaConf.update(cfg, key, value)
        with pytest.raises(ConfigError) as err:
            check_finite(cfg)
        assert str(err.value) == f"{key}={value} must be a finite number"


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["trainer.lr=inf"], "trainer.lr=inf must be a finite number"),
        (["trainer.lr=nan"], "trainer.lr=nan must be a finite number"),
        (["trainer.max_grad_norm=-inf"], "trainer.max_grad_norm=-inf must be a finite number"),
        (["algo.kl.target=inf"], "algo.kl.target=inf must be a finite number"),
        (["algo.trl.beta=nan"], "algo.trl.beta=nan must be a finite number"),
        (ALGOS["d2l"] + ["algo.alpha=nan"], "algo.alpha=nan must be a finite number"),
        (ALGOS["contrastive"] + ["algo.temperature=inf"], "algo.temperature=inf must be a finite number"),
        # free-form parts of a schema (dict[str, Any]) are walked too
        (["model.arch.rope_theta=inf"], "model.arch.rope_theta=inf must be a finite number"),
        (["data=arith", "algo.rewards.0.weight=nan"], "algo.rewards[0].weight=nan must be a finite number"),
    ],
)
def test_compose_refuses_non_finite_in_one_line(overrides, line):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert str(err.value) == line


# -- data files ---------------------------------------------------------------------------------------------------
def _jsonl(path: Path, *rows: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_not_utf8_names_file_line_and_column(tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_bytes(b'{"prompt": "a"}\n\n{"prompt": "caf\xe9"}\n')  # Latin-1 on line 3
    with pytest.raises(DataError) as err:
        read_jsonl(f)
    assert str(err.value).startswith(f"{f}:3:16: not UTF-8 text (byte 0xe9)")
    f.write_text('{"prompt": "a"}\n', encoding="utf-16")  # BOM 0xff 0xfe
    with pytest.raises(DataError, match=re.escape(f"{f}:1:1: not UTF-8 text (byte 0xff)")):
        read_jsonl(f)
    g = tmp_path / "data.json"
    g.write_bytes(b'[\n {"context": "\xff"}\n]')
    with pytest.raises(DataError, match=re.escape(f"{g}:2:15: not UTF-8 text (byte 0xff)")):
        read_json(g)


def test_utf8_text_reads(tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_text('{"prompt": "café ∑ 12"}\r\n\n{"prompt": "zwei"}', encoding="utf-8")  # CRLF, blank line, no final \\n
    assert [r["prompt"] for r in read_jsonl(f)] == ["café ∑ 12", "zwei"]


@pytest.mark.parametrize(
    "prompt, problem",
    [
        ("count to 3", None),
        ([{"role": "user", "content": "count to 3"}], None),
        ([{"role": "system", "content": ""}, {"role": "user", "content": "hi"}], None),
        ("", "prompt is empty"),
        ("  \n\t", "prompt is empty"),
        ([], "prompt is empty (no message has any content)"),
        ([{"role": "user", "content": " "}], "prompt is empty (no message has any content)"),
        (3, "prompt must be a string or a list of chat messages {role, content}, got a number"),
        (None, "prompt must be a string or a list of chat messages {role, content}, got null"),
        (True, "prompt must be a string or a list of chat messages {role, content}, got true/false"),
        (
            {"role": "user", "content": "hi"},
            "prompt must be a string or a list of chat messages {role, content}, got an object",
        ),
        (["count to 3"], "got a list that is not {role, content} messages"),
        ([{"role": "user", "content": None}], "got a list that is not {role, content} messages"),
    ],
)
def test_prompt_problem(prompt, problem):
    got = prompt_problem(prompt)
    assert got is None if problem is None else problem in got


def test_bad_prompt_names_file_and_line(tmp_path):
    f = _jsonl(tmp_path / "data.jsonl", {"prompt": "ok"}, "", {"prompt": 7})
    with pytest.raises(DataError) as err:
        read_jsonl(f)
    assert str(err.value) == (
        f"{f}:3: prompt must be a string or a list of chat messages {{role, content}}, got a number"
    )
    f = _jsonl(tmp_path / "data.jsonl", {"prompt": "ok"}, {"prompt": ""})
    with pytest.raises(DataError, match=re.escape(f"{f}:2: prompt is empty")):
        read_jsonl(f)
    f = _jsonl(tmp_path / "data.jsonl", {"prompt": "ok"}, {"prompt": [{"role": "user", "content": "hi"}]})
    with pytest.raises(DataError) as err:
        read_jsonl(f)
    assert str(err.value) == (
        f"{f}:2: prompt is chat messages but line 1's is a string (use one kind for the whole file)"
    )


def test_rows_without_prompt_are_not_prompt_data(tmp_path):
    f = _jsonl(tmp_path / "triplets.jsonl", {"id": "a", "answer": ""})
    assert read_jsonl(f) == [{"id": "a", "answer": ""}]


def test_check_data_file_reads_a_directory_and_json(tmp_path):
    _jsonl(tmp_path / "a.jsonl", {"prompt": "ok"})
    (tmp_path / "b.json").write_text('[{"x": 1},\n {"x": 2,}]')
    (tmp_path / "c.parquet").write_bytes(b"PAR1\x00\xff")  # binary formats are the loader's business
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'b.json'}:2:10: malformed JSON")):
        check_data_file(tmp_path)
    (tmp_path / "b.json").write_text('[{"x": 1}]')
    check_data_file(tmp_path)


def test_loaders_refuse_non_utf8_files(tmp_path):
    """The loaders read local files the same way, so a sweep job (no CLI pre-check) fails in one line too."""
    from posttrain.data.d2l.squad import load_squad
    from posttrain.data.rlvr.loaders import load_gsm8k

    f = tmp_path / "gsm8k.jsonl"
    f.write_bytes(b'{"question": "caf\xe9?", "answer": "x #### 5"}\n')
    with pytest.raises(DataError, match=re.escape(f"{f}:1:18: not UTF-8 text")):
        load_gsm8k(str(f))
    f = tmp_path / "squad.jsonl"
    f.write_bytes(b'{"context": "\xe9", "question": "q", "answers": ["a"]}\n')
    with pytest.raises(DataError, match=re.escape(f"{f}:1:14: not UTF-8 text")):
        load_squad(str(f))


def test_grpo_dataset_refuses_empty_prompt_at_build_time(tmp_path, compose):
    """Inside a run (sweeps skip the CLI pre-check) the GRPO data build refuses it as well."""
    from posttrain.data import build_grpo_dataset

    f = _jsonl(tmp_path / "data.jsonl", {"prompt": "count to 3"}, {"prompt": ""})
    cfg = compose("data.source=jsonl", f"data.path={f}")
    with pytest.raises(DataError, match=re.escape(f"{f}:2: prompt is empty")):
        build_grpo_dataset(cfg.data, tokenizer=None, max_prompt_length=64)


def test_check_inputs_reads_the_data_file_before_the_run(tmp_path, compose):
    f = tmp_path / "data.jsonl"
    f.write_bytes(b'{"prompt": "\xe9"}\n')
    cfg = compose("data.source=jsonl", f"data.path={f}")
    with pytest.raises(DataError, match="not UTF-8 text"):
        check_inputs(cfg, str(tmp_path / "run"), [])
    with pytest.raises(DataError, match="dataset file not found"):
        check_inputs(compose("data.source=jsonl", f"data.path={tmp_path / 'nope.jsonl'}"), str(tmp_path / "run"), [])
    check_inputs(compose("data.source=jsonl", f"data.path={f}", "mode=plan"), str(tmp_path / "run"), [])  # not read
    assert not (tmp_path / "run").exists()


# -- run directories ----------------------------------------------------------------------------------------------
def test_run_dir_with_a_file_in_the_way(tmp_path):
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(RunDirError) as err:
        check_run_dir(str(tmp_path / "blocker"))
    assert str(err.value) == (
        f"hydra.run.dir={tmp_path / 'blocker'}: cannot create the run directory ({tmp_path / 'blocker'} is a file)"
    )
    with pytest.raises(RunDirError, match=re.escape(f"({tmp_path / 'blocker'} is a file)")):
        check_run_dir(str(tmp_path / "blocker" / "a" / "run"))
    with pytest.raises(RunDirError, match=re.escape(f"({tmp_path / 'blocker'} is a file)")):
        check_run_dir(f"{tmp_path}/blocker/${{now:%H-%M-%S}}_x")  # the part Hydra resolves later is not needed
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(RunDirError, match="is a broken symlink"):
        check_run_dir(str(tmp_path / "dangling" / "run"))


def test_run_dir_not_writable(tmp_path, monkeypatch):
    import posttrain.inputs

    monkeypatch.setattr(posttrain.inputs.os, "access", lambda path, mode: Path(path) != tmp_path)  # read-only mount
    with pytest.raises(RunDirError, match=re.escape(f"({tmp_path} is not writable)")):
        check_run_dir(str(tmp_path / "a" / "run"))


def test_creatable_run_dirs_pass_and_nothing_is_created(tmp_path):
    check_run_dir(str(tmp_path / "a" / "b" / "run"))
    check_run_dir(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_default_run_dir_is_checked(tmp_path, monkeypatch, compose):
    """No hydra.run.dir on the command line: the configured `runs/${now:...}/...` is checked from the cwd."""
    monkeypatch.chdir(tmp_path)
    check_inputs(compose(), None, [])
    (tmp_path / "runs").write_text("not a directory")
    line = f"cannot create the run directory ({tmp_path / 'runs'} is a file)"
    with pytest.raises(RunDirError, match=re.escape(line)):
        check_inputs(compose(), None, [])
