"""`run(cfg)`: the one dispatch behind `train.py` — validation, hw profile, run directory, mode, summary.

It talks to algorithms only through `posttrain.algos.base.Algorithm` (found by name in `posttrain.algos.registry`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from posttrain.algos.base import Algorithm
from posttrain.algos.registry import get_algorithm
from posttrain.callbacks import JsonlMetricsCallback, read_metrics, summary_stats
from posttrain.callbacks.console import ConsoleSpec, finish_run, use_console
from posttrain.callbacks.time_limit import StopAtStep, StopOnSignal, WallClockLimit
from posttrain.checkpoints import (
    check_run_identity,
    complete_checkpoints,
    eval_checkpoint,
    finished_message,
    finished_step,
    identity,
    resolve_resume,
)
from posttrain.config.auto_hw import resolve_auto_hw
from posttrain.config.validate import ConfigError, validate
from posttrain.dist import export_submitit_env, is_main_process, world_size
from posttrain.engines import launched_engine, shards_parameters, start_cpu_engine
from posttrain.errors import DiskFullError, is_disk_full
from posttrain.run_lock import run_dir_lock


def run_dir_of(cfg: DictConfig) -> Path:
    if cfg.get("run_dir"):
        return Path(cfg.run_dir)
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def objective(cfg: DictConfig, summary: dict[str, Any]) -> float | None:
    """The number the task function returns to Hydra sweepers: `summary[optimized_metric]`, default "objective".

    The key comes from `optimized_metric` in the config (the Optuna presets in conf/hparams_search/ set it).
    """
    key = OmegaConf.select(cfg, "optimized_metric", default=None)
    if not key:
        return summary.get("objective")
    if key not in summary:
        raise ConfigError(f"optimized_metric={key!r} is not in summary.json (has: {', '.join(sorted(summary))})")
    return summary[key]


def prepare_run_dir(cfg: DictConfig, run_dir: Path) -> str | None:
    """The checkpoint to resume from; refuses (before anything is written) a run dir that holds another run."""
    resume = resolve_resume(cfg.resume, run_dir)
    if is_main_process():
        check_run_identity(run_dir, identity(cfg), resume, auto=cfg.resume == "auto")
    return resume


def train(cfg: DictConfig, run_dir: Path, callbacks: list | None = None, resume: Any = ...) -> dict[str, Any]:
    """Build the algorithm's trainer and train; `callbacks` are added to the metrics callback (tests use them to
    stop a run early). `resume`: the checkpoint `prepare_run_dir` resolved (default `...`: resolve it here)."""
    import transformers

    algorithm = get_algorithm(cfg.algo.name)
    if resume is ...:
        resume = prepare_run_dir(cfg, run_dir)
    transformers.set_seed(cfg.seed)
    metrics_path = run_dir / "metrics.jsonl"
    start = time.time()
    callbacks = [JsonlMetricsCallback(metrics_path), *(callbacks or [])]
    limit = WallClockLimit(cfg.trainer.max_time_s) if cfg.trainer.get("max_time_s") else None
    if limit:
        callbacks.append(limit)
    stop = StopAtStep(cfg.trainer.stop_step) if cfg.trainer.get("stop_step") else None
    if stop:
        callbacks.append(stop)
    signals = StopOnSignal()
    callbacks.append(signals)
    trainer = algorithm.build_trainer(cfg, run_dir, callbacks)
    use_console(trainer, algorithm.console)  # one bar + compact lines instead of HF's printed dicts
    try:
        trainer.train(resume_from_checkpoint=resume)
    except (OSError, RuntimeError) as ex:
        if not is_disk_full(ex):
            raise
        saved = complete_checkpoints(run_dir / "checkpoints")
        kept = f"the newest complete checkpoint, {saved[-1].name}, is whole" if saved else "no checkpoint was complete"
        free = shutil.disk_usage(run_dir).free / 2**20
        raise DiskFullError(
            f"the disk of {run_dir} is full ({free:.0f} MiB free) at step {trainer.state.global_step}: {kept}; free "
            "space (or lower trainer.save_total_limit) and rerun with resume=auto"
        ) from None
    finally:
        signals.restore()
    if not is_main_process():  # metrics and summary are rank 0's
        return {}
    summary = _summary(algorithm, read_metrics(metrics_path), time.time() - start, trainer.state.global_step)
    summary["world_size"] = world_size()
    if limit is not None and limit.stopped_at is not None:
        summary["stopped_by_max_time_s"] = limit.stopped_at
    if stop is not None and stop.stopped_at is not None:
        summary["stopped_by_stop_step"] = stop.stopped_at
    if signals.stopped_at is not None:
        summary["stopped_by_signal"] = {"signal": signals.received, "step": signals.stopped_at}
    evaluating = time.time()
    if shards_parameters(trainer):  # no process holds the whole model: one process evaluates the checkpoint
        summary["evaluation"] = (
            f"not after training: hw.accelerate_config={cfg.hw.accelerate_config} shards the parameters; on one "
            f"process: python train.py mode=eval hydra.run.dir={run_dir}"
        )
        print(summary["evaluation"], flush=True)
    else:
        summary.update(algorithm.summarize(cfg, trainer, run_dir))
    # runtime_s is training's; the algorithm's own evaluation after it (held-out scoring, ...) adds this
    summary["evaluation_s"] = round(time.time() - evaluating, 2)
    summary["total_s"] = round(time.time() - start, 2)
    return summary


def _summary(algorithm: Algorithm, metrics: list[dict[str, Any]], runtime: float, step: int) -> dict[str, Any]:
    """`final_step`: the optimizer step training ended at (the last logged step can be earlier: `logging_steps`)."""
    summary: dict[str, Any] = {"algo": algorithm.name, "runtime_s": round(runtime, 2), "logged_steps": len(metrics)}
    summary["final_step"] = step
    summary.update(summary_stats(metrics, ConsoleSpec.of(algorithm.console).trend))
    summary["objective"] = summary.get(algorithm.objective)
    return summary


def _cli_keys() -> set[str]:
    """The keys the command line set (empty outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    from posttrain.config.compose import override_keys

    return override_keys(HydraConfig.get().overrides.task) if HydraConfig.initialized() else set()


def _millions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e5 else str(n)


def run_header(cfg: DictConfig, run_dir: Path, applied: dict[str, Any]) -> str:
    """One line before training: where it writes, what runs (the profile's choices included), how much trains."""
    from posttrain.hardware.params import count_params

    counts = count_params(cfg)
    chosen = " ".join(f"{k}={v}" for k, v in applied.items() if "." in k)  # config keys (not process settings)
    return (
        f"run {run_dir}: algo={cfg.algo.name} model={cfg.model.name} hw={cfg.hw.name} precision={cfg.hw.precision} "
        f"kernels={cfg.kernels.backend} | params {_millions(counts.total)}, trainable {_millions(counts.trainable)}"
        + (f" | set by the profile: {chosen}" if chosen else "")
    )


def run(cfg: DictConfig) -> float | None:
    """Validate, apply the hw profile, then plan, train or evaluate; writes `config.yaml` and `summary.json` in the
    run dir and returns the objective (for Hydra sweepers)."""
    chosen = resolve_auto_hw(cfg, _cli_keys())  # hw=auto -> this machine's profile, before anything reads hw
    if chosen and is_main_process():
        print(chosen, flush=True)
    validate(cfg)
    from posttrain.hardware import apply_profile

    applied = apply_profile(cfg)  # once: attention, optimizer, batch, kernels, TF32, allocator (posttrain.hardware)
    if export_submitit_env() and (cfg.hw.accelerate_config or "ddp") != "ddp" and launched_engine() is None:
        raise ConfigError(
            f"hw.accelerate_config={cfg.hw.accelerate_config} in a submitit job of several tasks: the tasks would run "
            "DDP (only accelerate launch starts that engine); give the job one task per node and run "
            "python -m posttrain.launch in it (docs/scaleout.md, several machines)"
        )
    if cfg.mode in ("train", "eval"):
        start_cpu_engine(cfg.hw.device)  # FSDP/DeepSpeed on CPU processes (posttrain.engines)
    main_process = is_main_process()
    run_dir = run_dir_of(cfg)
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    if cfg.mode == "plan":
        from posttrain.hardware import plan_command

        plan_command(cfg)
        return None
    algorithm = get_algorithm(cfg.algo.name)
    if cfg.mode == "train":
        from posttrain.hardware.preflight import preflight

        preflight(cfg)
        if main_process:
            print(run_header(cfg, run_dir, applied), flush=True)
    # one training process per run dir (the lock is released when this process ends, however it ends)
    lock = run_dir_lock(run_dir) if cfg.mode == "train" and main_process else contextlib.nullcontext()
    with lock:
        return _run_in(cfg, run_dir, algorithm, main_process)


def _run_in(cfg: DictConfig, run_dir: Path, algorithm: Algorithm, main_process: bool) -> float | None:
    # a run dir holding another run (or checkpoints without resume=auto) is refused before config.yaml is written
    resume = prepare_run_dir(cfg, run_dir) if cfg.mode == "train" else None
    done = finished_step(resume, cfg) if cfg.mode == "train" else None
    if done is not None:  # a finished run: nothing is trained, written or deleted
        if main_process:
            print(finished_message(run_dir, done, cfg), flush=True)
        summary_path = run_dir / "summary.json"
        return objective(cfg, json.loads(summary_path.read_text())) if summary_path.is_file() else None
    if cfg.mode in ("export", "sample") and type(algorithm).trained_lm is Algorithm.trained_lm:
        algorithm.trained_lm(cfg, None)  # the algorithm's one-line refusal, before looking for a checkpoint
    if cfg.mode == "sample":
        from posttrain.sample import prompts_of

        prompts_of(cfg)  # no prompts: one line before the model loads
    checkpoint = eval_checkpoint(cfg, run_dir) if cfg.mode in ("eval", "export", "sample") else None
    run_dir.mkdir(parents=True, exist_ok=True)
    if main_process and cfg.mode not in ("export", "sample"):  # these leave the run's files as they are
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        # one config per run dir, the one that runs: Hydra's copy is the composition before the profile applied
        (run_dir / ".hydra" / "config.yaml").unlink(missing_ok=True)
    OmegaConf.set_readonly(cfg, True)  # what config.yaml says is what runs: nothing after this may change it
    if cfg.mode == "sample":
        from posttrain.sample import sample

        sample(cfg, checkpoint)
        return None
    if cfg.mode == "export":
        from posttrain.export import export

        info = export(cfg, run_dir, checkpoint)
        print(json.dumps(info))
        return None
    if cfg.mode == "eval":
        summary = algorithm.evaluate(cfg, run_dir, checkpoint)
    else:
        summary = train(cfg, run_dir, resume=resume)
    if not main_process:
        return None
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    _to_wandb(cfg, summary)
    if cfg.mode == "train":  # summary table on the terminal, curves in <run_dir>/plots/
        finish_run(run_dir, summary, algorithm.console)
    print(json.dumps({"run_dir": str(run_dir), **{k: v for k, v in summary.items() if not isinstance(v, dict)}}))
    return objective(cfg, summary)


def _to_wandb(cfg: DictConfig, summary: dict[str, Any]) -> None:
    """With logger=wandb: the composed config (as run) and summary.json into the W&B run, which then finishes."""
    if cfg.logger.name != "wandb":
        return
    import wandb

    if wandb.run is None:
        return
    wandb.run.config.update({"posttrain": OmegaConf.to_container(cfg, resolve=True)}, allow_val_change=True)
    wandb.run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))})
    wandb.finish()
