"""Every member of a group is sampled in the same generate call with the same generation config; vLLM is lazy."""

from __future__ import annotations

import importlib.util

import pytest

from posttrain.config.compose import load_config
from posttrain.errors import UserError
from tests.algos.grpo.helpers import first_batch, make_trainer


def test_group_members_share_one_generate_call_and_config(tmp_path):
    trainer = make_trainer(tmp_path, "algo.trl.temperature=0.7")
    calls = []
    original = trainer.model.generate

    def recording_generate(*args, **kwargs):
        calls.append((kwargs["input_ids"].clone(), kwargs["generation_config"]))
        return original(*args, **kwargs)

    trainer.model.generate = recording_generate
    first_batch(trainer)
    assert len(calls) == 1  # the whole generation batch (2 prompts x 4) in one call
    ids, gen_cfg = calls[0]
    assert ids.size(0) == 8
    rows = [tuple(r) for r in ids.tolist()]
    assert sorted(rows.count(r) for r in set(rows)) == [4, 4]
    assert gen_cfg.do_sample and gen_cfg.temperature == pytest.approx(0.7)
    assert gen_cfg.top_k in (0, None)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM installed: the error path is moot")
def test_vllm_backend_without_vllm_is_a_one_line_error(tmp_path):
    from posttrain.algos.grpo.build import build_trainer

    cfg = load_config(["algo.generation.backend=vllm", f"+run_dir={tmp_path}"])
    with pytest.raises(UserError, match=r"needs vLLM: pip install"):
        build_trainer(cfg, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed (GPU-only extra)")
def test_vllm_generation_is_wired_through_trl(tmp_path):  # pragma: no cover - runs on GPU machines
    from posttrain.algos.grpo.build import grpo_args

    cfg = load_config(["algo.generation.backend=vllm", "algo.trl.vllm_mode=colocate"])
    args = grpo_args(cfg, tmp_path)
    assert args.use_vllm and args.vllm_mode == "colocate"


def test_vllm_is_pinned_inside_trls_supported_range():
    """`pip install -e '.[gpu]'` must give a vLLM that TRL 1.16 accepts (it refuses others at import)."""
    import inspect
    import re
    import tomllib

    from packaging.version import Version
    from trl import import_utils

    from tests.conftest import ROOT

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    pin = next(r for r in extra if r.startswith("vllm"))
    assert re.fullmatch(r"vllm==[0-9.]+", pin), pin
    low, high = re.search(
        r'Version\("([0-9.]+)"\) <= _vllm_base_version <= Version\("([0-9.]+)"\)',
        inspect.getsource(import_utils.is_vllm_available),
    ).groups()
    assert Version(low) <= Version(pin.split("==")[1]) <= Version(high)
