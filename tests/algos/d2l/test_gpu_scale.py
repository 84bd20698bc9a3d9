"""experiments/d2l_smollm2/gpu_scale.py (the GPU driver): its override merging, and every arm composing as a config
(a typo in an arm would otherwise surface only on a lent GPU, after the wheel's calls)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from posttrain.algos.d2l.model import WEIGHTS
from posttrain.config.compose import load_config
from tests.conftest import experiment_script

ROOT = Path(__file__).resolve().parents[3]


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
    assert sorted(gpu_scale.SEVERAL_CHUNKS) == ["fact1_chunks", "fact1_chunks32", "facts9"]


def test_a_stop_step_past_the_schedule_is_refused_before_any_run(gpu_scale, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_scale.main(["--cpu", "--tiny", "--steps", "5", "--stop-step", "5", "--out", str(tmp_path), "fact1"])
    assert stop.value.code == 2 and "--stop-step 5 is not below the steps of fact1 (5)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no run started


def test_init_starts_every_run_from_the_hypernet_and_a_missing_one_is_refused(gpu_scale, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_scale.main(["--cpu", "--tiny", "--init", str(tmp_path / "gone"), "--out", str(tmp_path / "o"), "facts3"])
    assert stop.value.code == 2 and "no hypernet.safetensors there" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / WEIGHTS).write_bytes(b"")
    seen = {}

    def arm_job(arm, name, over, *rest):  # records each run's overrides instead of training
        seen[name] = over
        return {}

    monkeypatch.setattr(gpu_scale, "arm_job", arm_job)
    gpu_scale.main(["--cpu", "--tiny", "--init", str(tmp_path / "h"), "--out", str(tmp_path / "o"), "facts3@0,1"])
    assert sorted(seen) == ["facts3", "facts3_s1"]
    assert all(f"algo.init_hypernet={tmp_path / 'h'}" in over for over in seen.values())


def test_init_with_s_continues_each_seed_from_its_own_hypernet(gpu_scale, tmp_path, monkeypatch, capsys):
    for name in ("h", "h_s1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / WEIGHTS).write_bytes(b"")
    pattern = str(tmp_path / "h{s}")
    with pytest.raises(SystemExit) as stop:
        gpu_scale.main(["--cpu", "--tiny", "--init", pattern, "--out", str(tmp_path / "o"), "facts3@0,1,2"])
    assert stop.value.code == 2 and f"--init {tmp_path / 'h_s2'}: no {WEIGHTS} there" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    seen = {}
    monkeypatch.setattr(gpu_scale, "arm_job", lambda arm, name, over, *rest: seen.update({name: over}) or {})
    gpu_scale.main(["--cpu", "--tiny", "--init", pattern, "--out", str(tmp_path / "o"), "facts3@0,1", "fact1@1"])
    inits = {name: [o for o in over if o.startswith("algo.init_hypernet=")] for name, over in seen.items()}
    assert inits == {
        "facts3": [f"algo.init_hypernet={tmp_path / 'h'}"],
        "facts3_s1": [f"algo.init_hypernet={tmp_path / 'h_s1'}"],
        "fact1_s1": [f"algo.init_hypernet={tmp_path / 'h_s1'}"],
    }


@pytest.fixture(scope="module")
def gpu_bundle():
    return experiment_script(ROOT / "experiments" / "d2l_smollm2" / "gpu_bundle.py")


def test_bundle_runs_are_named_as_gpu_scale_names_them(gpu_bundle):
    assert gpu_bundle.arm_and_seed("fact1_chunks_s2") == ("fact1_chunks", 2)
    assert gpu_bundle.arm_and_seed("fact1") == ("fact1", 0)
    assert [gpu_bundle.set_name(1, t) for t in (0, 1024, 4096)] == ["s1", "s1_x2", "s1_x8"]
    with pytest.raises(ValueError, match=r"fact2: not a gpu_scale\.py run"):
        gpu_bundle.arm_and_seed("fact2")
    with pytest.raises(ValueError, match="1000 tokens is not a multiple"):
        gpu_bundle.set_name(0, 1000)


@pytest.mark.slow  # three train.py processes on a small random model: ~75 s
def test_a_hypernet_brought_back_scores_here_as_it_did_there(gpu_scale, gpu_bundle, tmp_path):
    """The device's side on this CPU (--cpu --tiny), then this machine's: the run's hypernet comes back without its
    optimizer state, unpacks into report.py's folders, and evaluated again gives the device's numbers."""
    bundle, results = tmp_path / "d2l_scale", tmp_path / "results"
    device = ["--cpu", "--tiny", "--steps", "3", "--seeds", "1", "--threads", "1", "--eval-tokens", "1024"]
    gpu_scale.main([*device, "--out", str(bundle), "fact1_chunks"])
    kept = bundle / "fact1_chunks_s1_hypernet"
    assert (kept / "hypernet.safetensors").is_file() and not list(kept.glob("optimizer*"))
    written = gpu_bundle.unpack(bundle, results)
    assert [w.relative_to(results).as_posix() for w in written] == ["fact1_chunks/s1", "fact1_chunks/s1_x2"]
    there = json.loads((results / "fact1_chunks" / "s1_x2" / "eval.json").read_text())
    here_args = ["--tiny", "--eval-tokens", "1024", "--eval-docs", "4", "--conditions", "d2l,d2l_other_doc"]
    gpu_bundle.main(["evaluate", str(bundle), str(results), *here_args, "--threads", "1"])
    here = json.loads((results / "fact1_chunks_cpu" / "s1_x2" / "eval.json").read_text())
    assert here["conditions"] == ["d2l", "d2l_other_doc"] and here["num_questions"] == there["num_questions"]
    # the same numbers to the last bit (fp32, one thread, both here): the hypernet at its initialisation, which the
    # same seed would rebuild, differs from the trained one in the 6th digit
    for cond in ("d2l", "d2l_other_doc"):
        assert here[cond]["answer_loss"] == there[cond]["answer_loss"]
    assert there["d2l"]["answer_loss"] != there["no_context"]["answer_loss"]  # the generated LoRA acts


def test_a_run_past_its_limit_is_ended_and_its_hypernet_still_kept(gpu_scale, tmp_path, monkeypatch):
    """--limit-s: the driver ends its own runs, so that the hypernets of the checkpoints they wrote come back (on
    2026-11-28 the caller's limit killed the driver during the end-of-run evaluations, and they stayed behind)."""
    log = tmp_path / "sleep.log"
    t0 = time.time()
    assert gpu_scale.run([sys.executable, "-c", "import time; time.sleep(60)"], log, 1, timeout_s=0.5) == 124
    assert time.time() - t0 < 30 and log.read_text().endswith("ended after 0 s (--limit-s)\n")

    given = []

    def train_then_hang(cmd, log, threads, timeout_s=None):  # a checkpoint written, then the evaluation overruns
        given.append(timeout_s)
        run_dir = Path(next(c for c in cmd if c.startswith("hydra.run.dir=")).partition("=")[2])
        ckpt = run_dir / "checkpoints" / "checkpoint-7"
        ckpt.mkdir(parents=True)
        for name in (WEIGHTS, "optimizer.pt"):
            (ckpt / name).write_bytes(b"x")
        (ckpt / "COMPLETE").write_text('{"step": 7}')
        return 124

    monkeypatch.setattr(gpu_scale, "run", train_then_hang)
    name = f"limit_test_{tmp_path.name}"
    try:
        gpu_scale.arm_job("fact1", name, [], [1024], tmp_path, time.time(), 1, 4, time.time() + 100)
    finally:
        shutil.rmtree(Path("/tmp") / f"d2l_{name}", ignore_errors=True)
    assert len(given) == 1 and 90 < given[0] <= 100  # the time left; no long evaluation after an ended run
    kept = tmp_path / f"{name}_hypernet"
    assert (kept / WEIGHTS).is_file() and not (kept / "optimizer.pt").exists()
    assert json.loads((tmp_path / f"{name}.json").read_text())["long"] == {}
