"""Several machines: `posttrain.launch` inside a SLURM allocation of several nodes (one launcher per node) gives
accelerate the machine rank, main address and port of the job; a submitit job of several tasks, which runs the
tasks as DDP, refuses a sharded engine instead of running DDP in its place."""

from __future__ import annotations

import pytest

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]"}


def _arg(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_each_nodes_launcher_joins_the_jobs_first_host(monkeypatch):
    from posttrain.launch import accelerate_command

    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    cmd = accelerate_command(["hw=h200", "hw.num_devices=8", "hydra.run.dir=runs/4242"])
    assert cmd.count("--num_processes") == 1 and _arg(cmd, "--num_processes") == "16"  # 8 per node x 2 nodes
    assert _arg(cmd, "--num_machines") == "2" and _arg(cmd, "--machine_rank") == "1"
    assert _arg(cmd, "--main_process_ip") == "gpu07" and _arg(cmd, "--main_process_port") == "29500"
    monkeypatch.setenv("MASTER_PORT", "31337")
    assert _arg(accelerate_command(["hw=h200", "hydra.run.dir=r"]), "--main_process_port") == "31337"
    with pytest.raises(ValueError, match=r"2 machines: pass hydra\.run\.dir="):
        accelerate_command(["hw=h200", "hw.num_devices=8"])  # each node would stamp its own run dir
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    one = accelerate_command(["hw=h200", "hw.num_devices=8"])
    assert "--num_machines" not in one and _arg(one, "--num_processes") == "8"


def test_a_sharded_engine_in_a_job_of_tasks_is_refused(compose, monkeypatch, tmp_path):
    import posttrain.run
    from posttrain.errors import ConfigError

    monkeypatch.setattr(posttrain.run, "export_submitit_env", lambda: True)  # what a 2-task submitit job does
    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(var, raising=False)
    cfg = compose("hw=cpu", "hw.num_devices=2", "hw.accelerate_config=fsdp2", run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"hw\.accelerate_config=fsdp2 in a submitit job of several tasks"):
        posttrain.run.run(cfg)
    assert not (tmp_path / "run").exists()
