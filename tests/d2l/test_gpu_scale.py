"""experiments/d2l_smollm2/gpu_scale.py (the GPU driver): its override merging, and every arm composing as a config
(a typo in an arm would otherwise surface only on a lent GPU, after the wheel's calls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.config.compose import load_config
from tests.conftest import experiment_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_scale():
    return experiment_script(ROOT / "experiments" / "d2l_smollm2" / "gpu_scale.py")


def test_a_later_override_replaces_an_earlier_one_in_place(gpu_scale):
    merged = gpu_scale.merged(["a=1", "data.params.x=2", "c=3"], ["++data.params.x=4", "d=5"])
    assert merged == ["a=1", "++data.params.x=4", "c=3", "d=5"]


@pytest.mark.parametrize("tiny", [False, True], ids=["arm", "tiny"])
def test_every_arm_composes(gpu_scale, tiny):
    for arm, overrides in gpu_scale.ARMS.items():
        extra = gpu_scale.TINY if tiny else []
        cfg = load_config(gpu_scale.merged(gpu_scale.COMMON, overrides, extra, ["trainer.max_time_s=60"]))
        assert cfg.algo.name == "d2l" and cfg.trainer.max_time_s == 60 and cfg.algo.kl_coef == 0, arm
        assert cfg.trainer.per_device_batch_size == 32 and cfg.hw.name == "h200", arm


def test_runs_name_their_seeds_per_arm_or_for_all(gpu_scale):
    assert gpu_scale.parse_runs(["fact1@1,2", "fact1_chunks"], "0,3") == [
        ("fact1", 1),
        ("fact1", 2),
        ("fact1_chunks", 0),
        ("fact1_chunks", 3),
    ]
    assert gpu_scale.parse_runs(["facts3"], "0") == [("facts3", 0)]


def test_long_documents_are_evaluated_only_for_arms_trained_on_several_chunks(gpu_scale):
    assert sorted(gpu_scale.SEVERAL_CHUNKS) == ["fact1_chunks", "facts9"]


def test_a_stop_step_past_the_schedule_is_refused_before_any_run(gpu_scale, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_scale.main(["--cpu", "--tiny", "--steps", "5", "--stop-step", "5", "--out", str(tmp_path), "fact1"])
    assert stop.value.code == 2 and "--stop-step 5 is not below the steps of fact1 (5)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no run started
