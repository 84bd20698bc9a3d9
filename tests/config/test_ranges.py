"""Declared valid values (posttrain.config.ranges): every numeric and path field of every schema declares a range, a
path kind or an explicit "any"; each range refuses the values just outside it in one line; path kinds are checked
before anything loads; the inputs of issue 24 fail with one `error:` line and a non-zero exit before training."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing

import pytest
from omegaconf import MISSING, OmegaConf

from posttrain.algos.registry import algorithms
from posttrain.cli_inprocess import run_cli_inprocess
from posttrain.config.compose import load_config
from posttrain.config.fields import check_declared, config_fields, declaration
from posttrain.config.ranges import Free, PathKind, Range
from posttrain.config.validate import ConfigError
from tests.conftest import ROOT

# a short run: every input below fails before training
FAST = ("trainer.max_steps=1", "trainer.progress_bar=false")

ALGOS = {
    "grpo": ["algo=grpo"],
    "contrastive": ["algo=contrastive", "data=contrastive_injection"],
    "d2l": ["algo=d2l", "data=d2l_synth"],
}
# a str field whose name says it holds a path (the walk below finds path fields by name, and must find these)
PATH_NAME = re.compile(r"path|file|dir|checkpoint|template|init_from|accelerate_config|resume|gguf")
KNOWN_PATHS = {
    "model.path",
    "model.gguf_file",
    "model.fetch.gguf",
    "model.chat_template",
    "hw.accelerate_config",
    "data.path",
    "eval.checkpoint",
    "resume",
    "run_dir",
}


def _alternatives(hint: typing.Any) -> list:
    """What a hint allows, None left out: `int | None` -> [int], `list[int] | None` -> [list[int]]."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return [a for a in (typing.get_args(hint) if union else (hint,)) if a is not type(None)]


def _types(hint: typing.Any) -> set:
    """The alternatives' types, generics by their origin (list, dict)."""
    return {typing.get_origin(a) or a for a in _alternatives(hint)}


def _needs_declaration(key: str, hint: typing.Any) -> bool:
    """Numbers, containers that may hold numbers (free-form mappings, lists of numbers or of mappings), and paths;
    not switches (bool), not names and containers of names (`target_modules`, `attn_implementation`)."""
    kinds = _types(hint)
    if bool in kinds:
        return False
    if kinds & {int, float}:
        return True
    if kinds & {list, dict}:
        return not any(typing.get_args(a)[-1:] == (str,) for a in _alternatives(hint))
    return str in kinds and bool(PATH_NAME.search(key.rsplit(".", 1)[-1]))


def every_field() -> list[tuple[str, str, dataclasses.Field, typing.Any]]:
    """(algo, key, field, hint) for the shared groups (once, under "grpo") and every registered algorithm's schema."""
    out = []
    for name, algorithm in algorithms().items():
        for key, f, hint in config_fields(algorithm.schema):
            if key.startswith("algo.") or name == "grpo":
                out.append((name, key, f, hint))
    return out


def test_every_numeric_and_path_field_of_every_schema_declares_its_values():
    fields = every_field()
    keys = {key for _, key, _, _ in fields}
    assert {"model.lora.r", "algo.trl.top_p", "algo.kl.beta_max", "algo.aggregator.num_heads"} <= keys
    assert {
        "algo.encoder.max_chunks",
        "algo.trl.vllm_gpu_memory_utilization",
        "trainer.max_grad_norm",
        "seed",
    } <= keys
    assert set(algorithms()) == set(ALGOS)
    need = {key for _, key, f, hint in fields if _needs_declaration(key, hint)}
    assert need >= {*KNOWN_PATHS, "algo.init_from", "algo.kl_cache_dir"}
    assert "model.lora.target_modules" not in need and "trainer.progress_bar" not in need  # names, switches
    undeclared = sorted(key for _, key, f, hint in fields if key in need and declaration(f) is None)
    assert undeclared == [], f"declare a range, a path kind or free(...) for: {undeclared}"
    for _, key, f, hint in fields:
        spec = declaration(f)
        if isinstance(spec, Free):
            assert len(spec.reason) > 10, key  # "any" says why
        if isinstance(spec, PathKind):
            assert _types(hint) == {str}, key
        if isinstance(spec, Range):
            assert _types(hint) <= {int, float}, key


def test_every_default_and_every_profile_lies_in_its_range():
    for _, key, f, _ in every_field():
        spec = declaration(f)
        if isinstance(spec, Range) and f.default not in (MISSING, None, dataclasses.MISSING):
            assert spec.contains(f.default), (key, f.default, str(spec))
    profiles = [p.stem for p in (ROOT / "conf" / "hw").glob("*.yaml") if "\ndevice_gib:" in p.read_text()]
    assert {"cpu", "rtx4090", "a100", "h200", "tpu"} <= set(profiles)
    for profile in profiles:  # each concrete profile sets the hw fields (the schema has no defaults there)
        check_declared(load_config([f"hw={profile}"], validate_rules=False))
    for overrides in ALGOS.values():
        check_declared(load_config(overrides, validate_rules=False))


def _outside(spec: Range, integer: bool) -> list[float]:
    """The values just outside `spec` (and the boundary where it is closed, which must pass)."""
    step = 1 if integer else 1e-3
    out = []
    if spec.gt is not None:
        out.append(spec.gt)
    if spec.ge is not None:
        out.append(spec.ge - step)
    if spec.lt is not None:
        out.append(spec.lt)
    if spec.le is not None:
        out.append(spec.le + step)
    return [int(v) if integer else float(v) for v in out]


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_each_range_refuses_the_values_just_outside_it_in_one_line(algo):
    base = load_config(ALGOS[algo])
    checked = 0
    for name, key, f, hint in every_field():
        spec = declaration(f)
        if not isinstance(spec, Range) or (key.startswith("algo.") and name != algo):
            continue
        integer = int in _types(hint)
        for value in _outside(spec, integer):
            cfg = base.copy()
            OmegaConf.update(cfg, key, value)
            with pytest.raises(ConfigError) as err:
                check_declared(cfg)
            assert str(err.value) == f"{key}={value} must be {spec}" + (f" ({spec.note})" if spec.note else "")
            checked += 1
        for closed in (spec.ge, spec.le):
            if closed is not None:
                cfg = base.copy()
                OmegaConf.update(cfg, key, int(closed) if integer else float(closed))
                check_declared(cfg)
    assert checked >= {"grpo": 40, "contrastive": 30, "d2l": 40}[algo], checked


def test_range_wording():
    assert str(Range(gt=0, le=1)) == "in (0, 1]" and str(Range(ge=0, lt=1)) == "in [0, 1)"
    assert str(Range(gt=0)) == "> 0" and str(Range(ge=2)) == ">= 2" and str(Range(le=0.5)) == "<= 0.5"
    assert Range(ge=2, note="advantages are per group").problem(1) == "must be >= 2 (advantages are per group)"
    assert Range(gt=0, lt=1).problem(0.5) is None and Range(gt=0, lt=1).problem(math.nan) is not None
    with pytest.raises(ValueError):
        Range(gt=0, ge=1)


@pytest.mark.parametrize(
    "override, line",
    [
        ("algo.trl.top_p=2", "algo.trl.top_p=2.0 must be in (0, 1]"),
        ("algo.trl.top_p=0", "algo.trl.top_p=0.0 must be in (0, 1]"),
        ("algo.trl.temperature=0", "algo.trl.temperature=0.0 must be > 0"),
        ("algo.trl.top_k=-1", "algo.trl.top_k=-1 must be >= 0 (0: off)"),
        ("model.lora.dropout=1", "model.lora.dropout=1.0 must be in [0, 1)"),
        ("algo.kl.target=0", "algo.kl.target=0.0 must be > 0 (or null: fixed beta)"),
        ("seed=-1", "seed=-1 must be in [0, 4294967295]"),
        ("trainer.save_total_limit=0", "trainer.save_total_limit=0 must be > 0 (or null: keep every checkpoint)"),
    ],
)
def test_library_ranges_at_compose(override, line):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value) == line
    load_config(["algo.trl.top_p=1", "algo.kl.target=null", "trainer.save_total_limit=null", "seed=0"])


# -- paths ---------------------------------------------------------------------------------------------------------
def test_path_kinds_are_checked_before_anything_loads(tmp_path):
    (tmp_path / "weights.gguf").write_text("x")
    (tmp_path / "ckpt").mkdir()
    bad = {
        f"model.path={tmp_path / 'nope'}": f"model.path={tmp_path / 'nope'}: no such model directory",
        f"model.path={tmp_path / 'weights.gguf'}": "is a file, not a directory",
        "model.gguf_file=weights.gguf": "model.gguf_file=weights.gguf: no such GGUF file",  # relative to the cwd
        f"model.gguf_file={tmp_path / 'ckpt'}": "is a directory, not a file",
        "model.chat_template=nope.jinja": "model.chat_template=nope.jinja: no such chat template (",
        f"eval.checkpoint={tmp_path / 'gone'}": "no such checkpoint directory",
        f"resume={tmp_path / 'weights.gguf'}": "is a file, not a directory",
    }
    for override, needle in bad.items():
        with pytest.raises(ConfigError) as err:
            load_config([override])
        assert needle in str(err.value) and "\n" not in str(err.value), (override, str(err.value))
    good = [
        ["model=smollm2_135m", f"model.path={tmp_path}", "model.gguf_file=weights.gguf"],  # relative to model.path
        ["model=smollm2_135m", f"model.gguf_file={tmp_path / 'weights.gguf'}"],
        ["eval.checkpoint=init", "resume=auto"],
        ["data=gsm8k"],  # nothing at data.path: a hub name
        ["model=smollm2_135m", "model.path=/nowhere", "mode=plan"],  # a plan reads no files
    ]
    for overrides in good:
        load_config(overrides)


def test_directories_created_on_first_use(tmp_path):
    (tmp_path / "file").write_text("x")
    base = ALGOS["d2l"]
    load_config([*base, f"algo.kl_cache_dir={tmp_path / 'a' / 'b'}"])  # created later
    with pytest.raises(ConfigError) as err:
        load_config([*base, f"algo.kl_cache_dir={tmp_path / 'file' / 'cache'}"])
    assert (
        str(err.value)
        == f"algo.kl_cache_dir={tmp_path / 'file' / 'cache'}: cannot be created: {tmp_path / 'file'} is a file"
    )


def test_cache_root_that_is_a_file(tmp_path, monkeypatch):
    from posttrain.models.fetch import CacheError, cache_root

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "file"))
    with pytest.raises(CacheError) as err:
        cache_root()
    assert str(err.value) == (
        f"POSTTRAIN_CACHE={tmp_path / 'file'}: is a file, not a directory; POSTTRAIN_CACHE must name a directory"
    )
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "file" / "sub"))
    with pytest.raises(CacheError, match=r"cannot be created: .*file is a file"):
        cache_root()
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "new"))
    assert cache_root() == tmp_path / "new" and not (tmp_path / "new").exists()


# -- issue 24's inputs, through the command line -----------------------------------------------------------------
@pytest.mark.parametrize(
    "args, env, line",
    [
        (["model.lora.r=0"], {}, "error: model.lora.r=0 must be > 0"),
        (["algo.trl.temperature=-1"], {}, "error: algo.trl.temperature=-1.0 must be > 0"),
        (["algo.trl.top_p=2"], {}, "error: algo.trl.top_p=2.0 must be in (0, 1]"),
        (["algo.trl.epsilon=-0.2"], {}, "error: algo.trl.epsilon=-0.2 must be >= 0"),
        (
            ["model=smollm2_135m"],  # fetched once into the cache: the first thing its load does
            {"POSTTRAIN_CACHE": "{tmp}/cache_file"},
            "error: POSTTRAIN_CACHE={tmp}/cache_file: is a file, not a directory; "
            "POSTTRAIN_CACHE must name a directory",
        ),
    ],
)
def test_issue_inputs_fail_in_one_line_before_training(tmp_path, args, env, line):
    (tmp_path / "cache_file").write_text("not a directory\n")
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    run = tmp_path / "run"
    rc, out, err = run_cli_inprocess([*FAST, *args, f"hydra.run.dir={run}"], env=env)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and lines == [line.replace("{tmp}", str(tmp_path))], err[-3000:]
    assert "Traceback" not in out + err
    assert not (run / "metrics.jsonl").exists()  # nothing trained
    if not env:  # refused at compose: the run dir is never created
        assert not run.exists()
