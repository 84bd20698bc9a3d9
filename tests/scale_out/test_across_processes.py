"""`posttrain.across_processes` on one process (the 2-process behaviour: test_engines.py), the engine detection of
`posttrain.engines`, the combinations refused in one line, and how a rank ends (`posttrain.dist.exit_rank`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from posttrain.across_processes import as_global_term, gathered_blocks, token_weight
from posttrain.engines import launched_engine, start_cpu_engine


def test_alone_every_helper_is_the_identity():
    x = torch.arange(8.0).reshape(4, 2)
    assert token_weight(17) == 1.0
    same, world = gathered_blocks(x, 4)
    assert same is x and world == 1


def test_a_global_term_keeps_its_value_and_scales_its_gradient_by_the_processes():
    w = torch.tensor([1.5, -2.0], requires_grad=True)
    term = (w**2).sum()
    out = as_global_term(term, world=3)
    assert float(out.detach()) == pytest.approx(float(term.detach()))
    out.backward()
    assert torch.allclose(w.grad, 3 * 2 * w.detach())  # d/dw of sum(w^2), times 3


def test_the_engine_comes_from_accelerate_launchs_environment(monkeypatch):
    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(var, raising=False)
    assert launched_engine() is None
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert launched_engine() == "deepspeed"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert start_cpu_engine("cpu") is None  # one process: nothing to start
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert start_cpu_engine("cuda") is None  # a GPU: accelerate does it itself


def test_d2l_under_zero3_is_one_line(compose):
    from posttrain.errors import ConfigError

    sharded = ("algo=d2l", "data=d2l_synth", "hw=cpu", "hw.num_devices=2")
    with pytest.raises(ConfigError, match=r"algo=d2l does not train under hw\.accelerate_config=deepspeed_zero3: "):
        compose(*sharded, "hw.accelerate_config=deepspeed_zero3")
    assert compose(*sharded, "hw.accelerate_config=fsdp2").hw.accelerate_config == "fsdp2"


@pytest.mark.parametrize("world", ["1", "2"])
def test_a_rank_ends_without_the_interpreters_teardown(world):
    """`exit_rank`: a rank of a multi-process run leaves with exit 0 once its output is flushed, skipping the
    teardown (atexit, C++ destructors) where gloo's threads can abort it; alone it returns and nothing changes."""
    code = (
        "import atexit, sys; from posttrain.dist import exit_rank; "
        "atexit.register(lambda: print('teardown')); sys.stdout.write('done.'); exit_rank(); print('returned')"
    )
    env = {**os.environ, "WORLD_SIZE": world}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0
    assert out.stdout == ("done." if world == "2" else "done.returned\nteardown\n")
