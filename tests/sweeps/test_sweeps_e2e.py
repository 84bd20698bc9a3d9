"""End-to-end sweeps and multi-process runs on the tiny model: Optuna trials, the submitit launcher (local),
and a 2-process accelerate launch (gloo on CPU) that must match a 1-process run with the same global batch.
The sweeping `train.py -m` and the 1-process runs run in this interpreter; jobs, tasks and ranks are processes."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.analysis import load_optuna, load_runs, load_summaries
from tests.conftest import ROOT, run_cli
from tests.sweeps.test_sweeps_configs import needs_optuna, needs_submitit

pytestmark = pytest.mark.slow
TINY = ("algo.trl.num_generations=2", "trainer.progress_bar=false")


def _run_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.json").is_file())


@needs_optuna
def test_optuna_preset_completes_3_trials(tmp_path):
    sweep = tmp_path / "optuna"
    proc = run_cli(
        "-m",
        "hparams_search=grpo",
        "hydra.sweeper.n_trials=3",
        "trainer.max_steps=2",
        "trainer.per_device_batch_size=2",
        *TINY,
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_run_dirs(sweep)) == 3
    best = load_optuna(sweep)
    s = load_summaries(sweep)
    assert len(s) == 3 and set(s.attrs["swept"]) >= {"trainer.lr", "algo.trl.epsilon"}
    assert s["trainer.lr"].between(1e-4, 1e-2).all() and s["algo.trl.epsilon"].between(0.1, 0.3).all()
    assert set(s["algo.trl.beta"]) <= {0.0, 0.01, 0.04, 0.1}
    # the sweeper optimised what the task returned: the preset's optimized_metric of each trial's summary
    assert best["best_value"] == pytest.approx(s["reward_last5_mean"].max())
    assert set(best["best_params"]) == {"trainer.lr", "algo.trl.beta", "algo.trl.epsilon"}


@needs_submitit
def test_submitit_local_launcher_job_of_two_tasks(tmp_path):
    """hydra/launcher=local (submitit_local, the SLURM presets' shape): a job's 2 tasks become one DDP run (several
    jobs of a sweep: the basic and Optuna launchers above)."""
    sweep = tmp_path / "submitit"
    proc = run_cli(
        "-m",
        "hydra/launcher=local",
        "hydra.launcher.tasks_per_node=2",
        "hw.num_devices=2",
        "seed=2",
        "trainer.max_steps=2",
        "trainer.per_device_batch_size=2",
        *TINY,
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _run_dirs(sweep)
    assert len(runs) == 1  # one run dir per job, not per task
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == [
        p.name for p in runs
    ]
    s = load_summaries(sweep)
    assert list(s["seed"]) == [2] and (s["world_size"] == 2).all()
    df = load_runs(sweep)
    assert (df.groupby("run").size() == 2).all()  # rank 0 alone writes metrics: 2 steps, not 4
    assert list((sweep / ".submitit").glob("*/*_1_log.out")), "no second task ran"


def _seeded(*overrides: str, nproc: int, cwd: Path) -> subprocess.CompletedProcess:
    """tests/sweeps/seeded_train.py with `overrides`: `accelerate launch`ed on `nproc` ranks, or for one process in
    this interpreter (the same sampling, no launch)."""
    if nproc == 1:
        from tests.sweeps.seeded_train import seeded

        with seeded():
            return run_cli(*overrides, cwd=cwd)
    with socket.socket() as sock:  # a free rendezvous port: 29500 may be taken by another run on the machine
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "conf" / "accelerate" / "ddp.yaml"),
        "--num_processes",
        str(nproc),
        "--main_process_port",
        str(port),
        "--num_cpu_threads_per_process",
        "1",
        str(ROOT / "tests" / "sweeps" / "seeded_train.py"),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd + list(overrides), cwd=cwd, capture_output=True, text=True, timeout=900, env=env)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# eager and fused share the kernel path through the DDP wrapper (`kernels=` only picks the loss function): fused
# stands for both; tests/kernels check the backends against each other
@pytest.mark.parametrize("kernels", ["trl", "fused"])
def test_two_process_accelerate_matches_one_process(tmp_path, kernels):
    """2 ranks x 3 completions == 1 rank x 6 completions, step by step, with one run directory for both ranks,
    for TRL's loss path and for posttrain's kernel path (which must also go through the DDP wrapper's forward,
    or its gradients are never all-reduced).

    Sampling is made independent of the process layout (tests/sweeps/seeded_train.py: Gumbel-max with a generator
    per global row, an exact sample from the model's distribution). Everything else is the real pipeline:
    `accelerate launch` with conf/accelerate/ddp.yaml (gloo on CPU), TRL's per-rank prompt sharding, rewards gathered
    across ranks for the group advantages (with 3 completions per rank the second group straddles the two ranks),
    DDP gradient averaging and the optimizer step. Three steps are compared, so steps 2 and 3 also check that both
    layouts made the same update. A rank that saw the wrong prompts, a missing all-reduce, or per-rank advantages
    would change reward, loss or grad_norm well beyond the tolerance. Also: every rank's rewards are histogrammed
    with their own rows, and adaptive beta (`algo.kl.target`) moves on the KL of all processes.
    """
    common = ("trainer.max_steps=3", "algo.trl.beta=0.04", "algo.kl.target=0.001", f"kernels={kernels}", *TINY)
    one = tmp_path / "one"
    p1 = _seeded(*common, "trainer.per_device_batch_size=6", f"hydra.run.dir={one}", nproc=1, cwd=tmp_path)
    assert p1.returncode == 0, p1.stderr[-3000:]
    # no hydra.run.dir: the ranks must still agree on one default run dir under runs/<date>/
    p2 = _seeded(*common, "trainer.per_device_batch_size=3", "hw.num_devices=2", nproc=2, cwd=tmp_path)
    assert p2.returncode == 0, p2.stderr[-3000:]

    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "runs"]
    made = [p for p in (tmp_path / "runs").glob("*/*")]
    assert len(made) == 1 and made[0].name.endswith("_grpo_tiny_llama"), made  # one dir, not one per rank
    two = made[0]
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert json.loads((two / "summary.json").read_text())["world_size"] == 2
    assert json.loads((one / "summary.json").read_text())["world_size"] == 1
    assert p2.stdout.count('"run_dir"') == 1  # only rank 0 reports
    assert len(re.findall(r"step \d/3  reward", p2.stdout)) == 3 and p2.stdout.count("summary (grpo)") == 1
    # the two ranks print concurrently, so their lines can interleave: scan for the objects, not by line
    decoder, ranks, i = json.JSONDecoder(), [], p2.stdout.find('{"rank"')
    while i != -1:
        obj, end = decoder.raw_decode(p2.stdout, i)
        ranks.append(obj)
        i = p2.stdout.find('{"rank"', end)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert all(r["wrapped"] == "DistributedDataParallel" and r["num_processes"] == 2 for r in ranks), ranks
    hydra_overrides = yaml.safe_load((two / ".hydra" / "overrides.yaml").read_text())
    assert "hydra.output_subdir=null" not in hydra_overrides  # rank 0 wrote the Hydra files, not rank 1

    m1, m2 = _metrics(one), _metrics(two)
    assert [m["step"] for m in m1] == [m["step"] for m in m2] == [1, 2, 3]
    for a, b in zip(m1, m2):
        hist = {k: v for k, v in a.items() if k.startswith("reward_hist/")}
        assert hist and sum(hist.values()) == 6, hist  # 6 completions per step, each counted once
        assert {k: v for k, v in b.items() if k.startswith("reward_hist/")} == hist
        assert b["beta"] == pytest.approx(a["beta"], rel=1e-4)
        assert b["num_tokens"] == a["num_tokens"]  # the same prompts and completions
        for key in ("reward", "reward_std", "completions/mean_length"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), key
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5), "grad_norm"
        for key in ("entropy", "kl", "kl_p95") if kernels == "trl" else ("kl", "kl_p95"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3, abs=1e-6)
    assert m1[1]["kl"] > 0 and m1[0]["grad_norm"] > 0  # the comparison is not between zeros
    assert len({m["beta"] for m in m1}) == 3  # beta moved: not a comparison between constants
