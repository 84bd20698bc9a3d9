"""Full-size architectures with random weights on this CPU: build time, seconds per phase, peak RSS against `mode=plan`.

    python experiments/gpt_oss_20b/run.py ARM [ARM ...] [--set KEY=VALUE ...] [--out results/runs.csv]
    python experiments/gpt_oss_20b/run.py --list

Each arm runs in a fresh process (`--worker ARM`): it composes the arm's config as `train.py` would (the hw profile
applied), takes the memory plan of that config (`posttrain.hardware.plan_summary`: peak and per-phase GiB), builds the
algorithm's trainer through the registry (the model build timed on its own), and trains `trainer.max_steps` steps
with `posttrain.bench.step_timer.StepTimer` splitting each step into phases. A sampler thread reads the process's
resident set every 20 ms and keeps the largest value per phase label (build, generation, scoring, train = the
policy's forward and backward, other = optimizer and bookkeeping); `peak_rss_gib` is the kernel's high-water mark
(VmHWM) over the whole run, the figure the plan's `peak_gib` (which includes `hw.overhead_gib`, the process before the
model) is compared with; on CUDA also `torch.cuda.max_memory_allocated` (against the plan's `tensor_gib`), with
`--cuda-limit-gib` capping the process (`set_per_process_memory_fraction`: a 24 or 40 GiB card on an H200). One CSV
row per arm (`results/runs.csv`, appended; report.py reads it).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GPT_OSS_20B = ("model=gpt_oss", "model.tiny=true", "model.mxfp4=native", "hw=cpu", "hw.precision=bf16")
GPU_GRPO = (
    "model=gpt_oss",
    "model.tiny=true",
    "hw=h200",
    "algo=grpo",
    "trainer.max_steps=4",
    "trainer.per_device_batch_size=8",
    "algo.trl.num_generations=4",
    "algo.max_prompt_length=128",
    "algo.trl.max_completion_length=64",
    "algo.heldout=0",
    "trainer.progress_bar=false",
)
# small batches: what a 2-core machine finishes in minutes; sequences long enough to pass the 128-token window
# of the sliding layers are not needed for memory (the plan's terms are per token)
ARMS: dict[str, tuple[str, ...]] = {
    "gpt_oss_20b_grpo_lora": (
        *GPT_OSS_20B,
        "algo=grpo",
        "trainer.max_steps=2",
        "trainer.per_device_batch_size=4",  # completions: 2 prompts x 2
        "algo.trl.num_generations=2",
        "algo.max_prompt_length=64",
        "algo.trl.max_completion_length=16",
        "algo.generation.backend=static_policy",  # decodes from the policy: no second copy of 12.8 GiB
        "algo.heldout=0",
    ),
    "gpt_oss_20b_d2l": (
        *GPT_OSS_20B,
        "algo=d2l",
        "trainer.max_steps=1",
        "trainer.per_device_batch_size=4",
    ),
    "gpt_oss_20b_contrastive": (
        *GPT_OSS_20B,
        "algo=contrastive",
        "trainer.max_steps=1",
        "trainer.per_device_batch_size=2",  # triplets: 6 sequences per step
    ),
    # one CUDA GPU (../shared/GPU_CHECKS.md, item 1): the two ways to hold the experts, at a GPU batch; the first
    # step (compilation, CUDA graphs) is left out of the means with --warmup 1
    "gpt_oss_20b_grpo_lora_cuda_native": (*GPU_GRPO, "model.mxfp4=native"),
    "gpt_oss_20b_grpo_lora_cuda_dequantize": (*GPU_GRPO, "model.mxfp4=dequantize"),
    "llama3_1_8b_grpo_lora": (
        "model=llama3_1_8b",
        "model.tiny=true",
        "hw=cpu",
        "hw.precision=bf16",
        "model.dtype=bfloat16",  # bf16 weights (fp32 master weights would not fit: 30 GiB)
        "algo=grpo",
        "trainer.max_steps=1",
        "trainer.per_device_batch_size=4",
        "algo.trl.num_generations=2",
        "algo.max_prompt_length=64",
        "algo.trl.max_completion_length=16",
        "algo.generation.backend=static_policy",
        "algo.heldout=0",
    ),
}
FIELDS = (
    "arm",
    "commit",
    "steps",
    "warmup",
    "build_s",
    "model_build_s",
    "step_s",
    "generation_s",
    "scoring_s",
    "rewards_s",
    "loss_backward_s",
    "optimizer_s",
    "other_s",
    "gen_tokens_per_s",
    "peak_rss_gib",
    "plan_peak_gib",
    "plan_tensor_gib",
    "rss_over_plan",
    "rss_build_gib",
    "rss_generation_gib",
    "rss_scoring_gib",
    "rss_train_gib",
    "rss_other_gib",
    "plan_phases_gib",
    "threads",
    "device",
    "cuda_peak_gib",
    "cuda_limit_gib",
    "overrides",
)
GIB = 2**30


class RssSampler(threading.Thread):
    """The process's resident set every `interval` seconds; the largest per phase label (`label`, set by the run)."""

    def __init__(self, interval: float = 0.02):
        super().__init__(daemon=True)
        self.interval, self.label, self.peaks = interval, "build", {}
        self._stop_event = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def run(self) -> None:
        while not self._stop_event.is_set():
            value = self.rss()
            if value > self.peaks.get(self.label, 0):
                self.peaks[self.label] = value
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _labelled(sampler: RssSampler, obj: Any, name: str, label: str) -> None:
    """`obj.name` sets the sampler's label while it runs (restoring the outer one after)."""
    fn = getattr(obj, name, None)
    if fn is None:
        return

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        outer, sampler.label = sampler.label, label
        try:
            return fn(*args, **kwargs)
        finally:
            sampler.label = outer

    setattr(obj, name, wrapped)


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def worker(arm: str, extra: list[str], cuda_limit_gib: float | None = None, warmup: int = 0) -> dict[str, Any]:
    sampler = RssSampler()
    sampler.start()
    import tempfile

    import torch

    if torch.cuda.is_available() and cuda_limit_gib:  # a smaller card on a larger one (rtx4090: 24 GiB)
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(cuda_limit_gib * GIB / total)

    import posttrain.models as models
    from posttrain.algos.registry import get_algorithm
    from posttrain.bench.grpo_step import compose
    from posttrain.bench.step_timer import PHASES, StepTimer
    from posttrain.callbacks import JsonlMetricsCallback
    from posttrain.hardware import plan_summary

    overrides = [*ARMS[arm], *extra]
    cfg = compose(overrides)
    result, summary = plan_summary(cfg)
    timings: dict[str, float] = {}
    load = models.load

    def timed_load(*args, **kwargs):
        start = time.perf_counter()
        out = load(*args, **kwargs)
        timings["model_build_s"] = time.perf_counter() - start
        return out

    models.load = timed_load  # the algorithms import `load` from posttrain.models when they build
    with tempfile.TemporaryDirectory(prefix="gpt_oss_20b_") as tmp:
        import transformers

        transformers.set_seed(cfg.seed)
        start = time.perf_counter()
        trainer = get_algorithm(cfg.algo.name).build_trainer(cfg, Path(tmp), [JsonlMetricsCallback(Path(tmp) / "m")])
        build_s = time.perf_counter() - start
        timer = StepTimer.attach(trainer)
        _labelled(sampler, trainer, "_generate", "generation")
        _labelled(sampler, trainer, "_generate_and_score_completions", "scoring")
        _labelled(sampler, trainer, "training_step", "train")
        sampler.label = "other"
        trainer.train()
    sampler.stop()
    steps = timer.steps[warmup:] or timer.steps
    mean = {k: sum(s[k] for s in steps) / len(steps) for k in ("total", *PHASES)}
    gen_s = sum(s["generation"] for s in steps)
    peak = _vm_hwm()
    phases = {
        p: round((result.phase_bytes("persistent") + result.phase_bytes(p)) / GIB, 3)
        for p in ("train", "score", "generate", "step")
    }
    return {
        "arm": arm,
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "steps": len(steps),
        "warmup": warmup,
        "build_s": round(build_s, 2),
        "model_build_s": round(timings.get("model_build_s", float("nan")), 2),
        "step_s": round(mean["total"], 2),
        **{f"{p}_s": round(mean[p], 2) for p in PHASES},
        "gen_tokens_per_s": round(sum(s["completion_tokens"] for s in steps) / gen_s, 2) if gen_s else "",
        "peak_rss_gib": round(peak / GIB, 3),
        "plan_peak_gib": summary["peak_gib"],
        "plan_tensor_gib": summary["tensor_gib"],
        "rss_over_plan": round(peak / GIB / summary["peak_gib"], 3),
        **{
            f"rss_{k}_gib": round(sampler.peaks.get(k, 0) / GIB, 3)
            for k in ("build", "generation", "scoring", "train", "other")
        },
        "plan_phases_gib": json.dumps(phases),
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "cuda_peak_gib": round(torch.cuda.max_memory_allocated() / GIB, 3) if torch.cuda.is_available() else "",
        "cuda_limit_gib": cuda_limit_gib or "",
        "overrides": " ".join(overrides),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*")
    parser.add_argument("--set", action="append", default=[], help="an extra override for every arm")
    parser.add_argument("--out", default=str(HERE / "results" / "runs.csv"))
    parser.add_argument("--cuda-limit-gib", type=float, help="torch.cuda.set_per_process_memory_fraction to this")
    parser.add_argument("--warmup", type=int, default=0, help="steps left out of the per-step means")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for name, overrides in ARMS.items():
            print(name, " ".join(overrides))
        return 0
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or not args.arms:
        parser.error(f"arms: one or more of {', '.join(ARMS)} (got {unknown or 'none'})")
    if args.worker:
        print(json.dumps(worker(args.arms[0], args.set, args.cuda_limit_gib, args.warmup)))
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    status = 0
    for arm in args.arms:
        cmd = [sys.executable, str(Path(__file__)), "--worker", arm, *[f"--set={s}" for s in args.set]]
        if args.cuda_limit_gib:
            cmd.append(f"--cuda-limit-gib={args.cuda_limit_gib}")
        cmd.append(f"--warmup={args.warmup}")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            status = 1
            print(f"{arm}: failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
            continue
        row = json.loads(lines[-1])
        print(json.dumps(row))
        append_row(out, row)
    return status


def append_row(out: Path, row: dict[str, Any]) -> None:
    """Append `row` to the CSV at `out`, rewriting it under FIELDS when it was written with other columns."""
    rows = []
    if out.exists():
        with out.open(newline="") as f:
            rows = list(csv.DictReader(f))
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows([*rows, row])


if __name__ == "__main__":
    sys.exit(main())
