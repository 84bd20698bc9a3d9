"""D2L test fixtures: one thread per process (the CI box is small and shared), a tiny D2L model."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for `python train.py` subprocesses
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def d2l_cfg(compose):
    def _cfg(*overrides: str):
        return compose("algo=d2l", "data=d2l_synth", "data.num_train=32", "data.num_eval=4", *overrides)

    return _cfg


@pytest.fixture
def d2l_model(d2l_cfg):
    from posttrain.algos.d2l import build_model

    def _model(*overrides: str):
        return build_model(d2l_cfg(*overrides))

    return _model
