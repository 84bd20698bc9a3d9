"""Fast checks of the sweep/launch presets: accelerate configs through accelerate's own launcher parsing, SLURM
presets through submitit's sbatch writer, the Optuna preset, rank handling and the objective returned to sweepers."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
import yaml
from hydra import compose, initialize_config_dir

from posttrain.config.registry import register
from posttrain.config.validate import ConfigError
from posttrain.paths import CONF_DIR
from tests.conftest import run_cli

ACCEL = CONF_DIR / "accelerate"
needs_submitit = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="needs hydra-submitit-launcher (pip install hydra-submitit-launcher==1.2.0)",
)
needs_optuna = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="needs hydra-optuna-sweeper (pip install hydra-optuna-sweeper==1.3.0)",
)


def _hydra_cfg(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def _accelerate_env(name: str, num_processes: int = 4) -> dict[str, str]:
    """What `accelerate launch --config_file conf/accelerate/<name>.yaml` exports to the ranks."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(
        ["--config_file", str(ACCEL / f"{name}.yaml"), "--num_processes", str(num_processes), "train.py"]
    )
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        return prepare_deepspeed_cmd_env(args)[1]
    assert args.multi_gpu or args.use_fsdp, name
    return prepare_multi_gpu_env(args)


def test_accelerate_configs_mean_what_they_say():
    ddp = _accelerate_env("ddp")
    assert "ACCELERATE_USE_FSDP" not in ddp and "ACCELERATE_USE_DEEPSPEED" not in ddp
    fsdp = _accelerate_env("fsdp2")
    assert fsdp["ACCELERATE_USE_FSDP"] == "true" and fsdp["FSDP_VERSION"] == "2"
    assert fsdp["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP" and fsdp["FSDP_RESHARD_AFTER_FORWARD"] == "true"
    for stage in (2, 3):
        ds = _accelerate_env(f"deepspeed_zero{stage}")
        assert ds["ACCELERATE_USE_DEEPSPEED"] == "true" and ds["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(stage)
        # accumulation and clipping come from the trainer group through HF's "auto" fill-in
        assert ds["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "auto" and ds["ACCELERATE_GRADIENT_CLIPPING"] == "auto"
    assert _accelerate_env("deepspeed_zero3")["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "true"
    for name in ("ddp", "fsdp2", "deepspeed_zero2", "deepspeed_zero3"):  # hw.precision decides, never the file
        assert _accelerate_env(name)["ACCELERATE_MIXED_PRECISION"] == "no"


def test_hw_profiles_name_existing_accelerate_configs():
    names = {p.stem for p in ACCEL.glob("*.yaml")}
    for hw in sorted((CONF_DIR / "hw").glob("*.yaml")):
        chosen = (yaml.safe_load(hw.read_text()) or {}).get("accelerate_config")
        assert chosen is None or chosen in names, f"{hw.name}: accelerate_config={chosen} not in {sorted(names)}"


@needs_submitit
@pytest.mark.parametrize("hw,gpus", [("rtx4090", 2), ("a100", 4), ("h200", 8)])
def test_slurm_presets_write_the_sbatch_they_promise(tmp_path, hw, gpus):
    from submitit.slurm.slurm import _make_sbatch_string

    cfg = _hydra_cfg(
        f"hydra/launcher=slurm_{hw}",
        f"hw={hw}",
        f"hw.num_devices={gpus}",
        "hydra.launcher.partition=gpuq",
        "hydra.launcher.account=proj1",
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.gpus_per_node == gpus and launcher.tasks_per_node == gpus
    text = _make_sbatch_string(
        command="python -m submitit.core._submit",
        folder=tmp_path,
        job_name="train",
        partition=launcher.partition,
        account=launcher.account,
        time=launcher.timeout_min,
        nodes=launcher.nodes,
        ntasks_per_node=launcher.tasks_per_node,
        gpus_per_node=launcher.gpus_per_node,
        cpus_per_task=launcher.cpus_per_task,
        mem=f"{launcher.mem_gb}GB",
        constraint=launcher.constraint,
    )
    for line in (
        f"#SBATCH --gpus-per-node={gpus}",
        f"#SBATCH --ntasks-per-node={gpus}",
        "#SBATCH --partition=gpuq",
        "#SBATCH --account=proj1",
        f"#SBATCH --time={launcher.timeout_min}",
    ):
        assert line in text, line


@needs_submitit
def test_local_and_cpu_presets_ask_for_no_gpu():
    for preset in ("local", "slurm_cpu"):
        launcher = _hydra_cfg(f"hydra/launcher={preset}").hydra.launcher
        assert launcher.gpus_per_node == 0 and launcher.tasks_per_node == 1


@needs_optuna
def test_optuna_preset_search_space_and_metric():
    cfg = _hydra_cfg("hparams_search=grpo")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"trainer.lr", "algo.trl.beta", "algo.trl.epsilon"}
    assert sweeper.sampler._target_.endswith("TPESampler") and sweeper.sampler.seed == 0
    metric = cfg.optimized_metric
    from posttrain.algos.registry import get_algorithm
    from posttrain.run import _summary

    metrics = [{"step": 1, "reward": 0.25, "loss": 0.1}, {"step": 2, "reward": 0.75, "loss": 0.0}]
    summary = _summary(get_algorithm("grpo"), metrics, 1.0, step=2)
    assert summary[metric] == pytest.approx(0.5)


def test_objective_follows_optimized_metric(monkeypatch):
    from omegaconf import OmegaConf

    from posttrain.run import objective

    summary = {"objective": 0.5, "final_reward": 0.9}
    assert objective(OmegaConf.create({"seed": 0}), summary) == 0.5
    assert objective(OmegaConf.create({"optimized_metric": "final_reward"}), summary) == 0.9
    with pytest.raises(ConfigError, match="final_rewrd"):
        objective(OmegaConf.create({"optimized_metric": "final_rewrd"}), summary)


def test_rank_overrides(monkeypatch):
    from posttrain.dist import RUN_STAMP_ENV, rank_overrides

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv(RUN_STAMP_ENV, raising=False)
    assert rank_overrides(["seed=1"]) == [] and RUN_STAMP_ENV not in os.environ
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert rank_overrides(["seed=1"]) == []
    # no launcher stamp: every rank stamps the run dir with its launcher process's start time
    stamp = os.environ[RUN_STAMP_ENV]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", stamp)
    with pytest.raises(ValueError, match="multirun"):
        rank_overrides(["-m", "seed=1,2", "hydra.run.dir=x"])
    monkeypatch.setenv("RANK", "1")
    assert rank_overrides(["hydra.run.dir=x"]) == [
        "hydra.output_subdir=null",
        "hydra/job_logging=none",
        "hydra/hydra_logging=none",
    ]
    assert os.environ[RUN_STAMP_ENV] == stamp


def test_run_dir_stamp_names_one_directory_for_all_ranks(monkeypatch):
    """conf/config.yaml's hydra.run.dir (the one home of the layout) reads the launcher's stamp."""
    from hydra.core.hydra_config import HydraConfig

    from posttrain.dist import RUN_STAMP_ENV

    monkeypatch.setenv(RUN_STAMP_ENV, "2020-01-02/03-04-05")
    cfg = _hydra_cfg("algo=grpo", "model=tiny_llama")
    HydraConfig.instance().set_config(cfg)
    assert cfg.hydra.run.dir == "runs/2020-01-02/03-04-05_grpo_tiny_llama"


@pytest.mark.parametrize("hw,config", [("rtx4090", "ddp"), ("h200", "fsdp2"), ("a100", "deepspeed_zero2")])
def test_accelerate_command_picks_the_hw_profiles_accelerate_config(hw, config):
    from posttrain.launch import accelerate_command

    cmd = accelerate_command([f"hw={hw}", "hw.num_devices=2", "model=llama3_2_1b"])
    assert cmd[cmd.index("--config_file") + 1] == str(ACCEL / f"{config}.yaml")
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    assert cmd[len(cmd) - cmd[::-1].index("-m")] == "posttrain"  # the installed package, not a file of the checkout
    assert cmd[-2:] == ["hw.num_devices=2", "model=llama3_2_1b"]


def test_every_sweep_job_is_checked_before_the_first_starts(tmp_path):
    """`-m model.lora.r=8,0` trained job 0 before job 1 failed; `-m trainer.lrr=...` printed Hydra's multi-line
    error recommending `+trainer.lrr`. Both are now one line naming the job, and no sweep dir is made."""
    from posttrain.cli import sweep_members
    from tests.conftest import run_cli

    assert sweep_members(["a.b=1,2", "c=3", "d=range(0,2)"]) == [
        ["a.b=1", "c=3", "d=0"],
        ["a.b=1", "c=3", "d=1"],
        ["a.b=2", "c=3", "d=0"],
        ["a.b=2", "c=3", "d=1"],
    ]
    sweep = tmp_path / "sweep"
    for args, line in (
        (("model.lora.r=8,0",), "error: sweep job model.lora.r=0: model.lora.r=0 must be > 0"),
        (
            ("trainer.lrr=1e-3,3e-3",),
            "error: sweep job trainer.lrr=0.001: trainer.lrr: Key 'lrr' not in 'TrainerConfig' "
            "(did you mean trainer.lr?)",
        ),
    ):
        proc = run_cli("-m", *args, "trainer.max_steps=1", f"hydra.sweep.dir={sweep}")
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
        assert not sweep.exists()


@pytest.mark.parametrize("config", ["fsdp2", "deepspeed_zero2", "deepspeed_zero3"])
def test_a_sharded_engine_on_cpu_runs_as_itself(config, capsys, monkeypatch):
    """On CPU the launcher runs the engine asked for (posttrain.engines; tests/scale_out run them), never DDP in its
    place; without DeepSpeed installed a ZeRO config is one line, before anything starts."""
    import importlib.util

    from posttrain.launch import main

    assert main(["--dry-run", "hw=cpu", "hw.num_devices=2", f"hw.accelerate_config={config}"]) == 0
    assert f"--config_file {ACCEL / config}.yaml" in capsys.readouterr().out
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    code = main(["--dry-run", "hw=cpu", "hw.num_devices=2", f"hw.accelerate_config={config}"])
    if config.startswith("deepspeed"):
        assert code == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: hw.accelerate_config={config} needs DeepSpeed, which is not installed: "
            "pip install deepspeed==0.19.8 (or -e .[gpu])"
        ]
    else:
        assert code == 0


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ("-m", "hparams_search=grpo", "hydra.sweeper.direction=minimize"),
            "error: hydra.sweeper.direction=minimize, but reward_last5_mean of algo=grpo is better higher: "
            "hydra.sweeper.direction=maximize",
        ),
        (
            ("-m", "hparams_search=grpo", "algo=d2l"),  # GRPO's search space under D2L: Optuna failed mid-study
            "error: hydra.sweeper.params: algo.trl.beta is not a key of this config (algo=d2l)",
        ),
    ],
)
def test_a_sweeper_that_cannot_work_is_refused_before_the_study(tmp_path, args, line):
    proc = run_cli(*args, "trainer.max_steps=1", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 2 and proc.stderr.strip() == line, proc.stderr[-2000:]
    assert not (tmp_path / "sweep").exists()


def test_each_algorithm_declares_which_way_its_objective_is_better():
    from posttrain.algos.registry import algorithms
    from posttrain.cli import direction_of

    ways = {name: direction_of("objective", algo) for name, algo in algorithms().items()}
    assert ways == {"grpo": "maximize", "d2l": "minimize", "contrastive": "minimize"}
    assert direction_of("heldout_acc_after", None) == "maximize" and direction_of("kl_last5_mean", None) == "minimize"
