"""Whole GRPO step, plain TRL against posttrain's default path, each round in fresh processes, alternating.

    python -m posttrain.bench grpo_step [--model smollm2_135m] [--batch 8] [--num-generations 4]
        [--completion-length 16] [--train lora|full] [--steps 6] [--warmup 2] [--rounds 3] [--threads 0]
        [--seed N] [--experiment grpo_smollm2_add] [--set KEY=VALUE ...] [--paths trl,posttrain]
        [--variant NAME:KEY=VALUE ...] [--heldout N]

Paths (same model, prompts, reward functions and weights, batch, LoRA config and training recipe):
- `trl` (the anchor): `trl.GRPOTrainer(model=<checkpoint dir>, peft_config=LoraConfig(...), args=GRPOConfig(...))`
  with the recipe's keys only (learning rate, schedule, clipping, beta, loss type, reward scaling, sampling
  temperature, lengths, batch, seed: what is learned) and TRL's own defaults for everything else (bf16 autocast,
  gradient checkpointing, HF `generate`, fp32 weights; a tiny offline model is passed as an instance).
- `posttrain`: `posttrain.algos.grpo.ALGORITHM.build_trainer(cfg, ...)` on the composed config
  (`+experiment=<experiment>`, the hw profile applied), i.e. what `python train.py +experiment=...` trains.
- `posttrain:NAME` (`--variant NAME:KEY=VALUE`, repeatable): posttrain's path with more overrides, e.g. a knob
  switched back (`--variant fp32:hw.precision=fp32`), run in the same alternation.
The defaults are the `make train` configuration (`+experiment=grpo_smollm2_add`) in TRL's step shape: 8 completions
per step (`--batch`; make train's is 16) and one generation batch per step, dynamic sampling off (`--set
algo.dynamic_sampling.enabled=true` for make train's refills; a variant of a dynamic-sampling option needs it). `--set`
applies to every path; the anchor reads only the recipe keys and the model from the config, so it changes the anchor
only through those.

Each (path, round) is one subprocess that builds its trainer, trains `warmup + steps` optimizer steps and times
each phase of every step (`posttrain.bench.step_timer`: wrapped trainer methods and a callback, the same for both
paths; both write metrics.jsonl through posttrain's metrics callback, the per-step reward curve comes from it).
Per round the means over the timed steps (so the split adds up to the step); per path the round with the
smallest mean step time (the least disturbed by other load on a shared machine), all rounds' means in
`step_s_rounds`. One JSON line per path: seconds per step and its split; CPU seconds per step (`cpu_s`, less
sensitive to other jobs' load than wall time; `cpu_ratio_vs_trl` from each path's smallest round); generated
tokens per second; peak RSS (VmHWM, reset after the model is built); `ratio_vs_trl` = posttrain / trl seconds
per step (best rounds; `ratio_vs_trl_median`: median over rounds); the knobs each path ran with; every round's
per-step rewards; /proc/loadavg before and after each round in `loadavg`. With `--heldout N`, every round also
scores its model before and after training on the first N test problems (`posttrain.algos.grpo.heldout`, the
evaluation `train.py` runs, outside the timed steps): `heldout_acc_before/after`, `heldout_gain` (best round)
and per-problem `heldout_correct` (after) for paired comparisons.
Exit status 0; 1 when a path failed (its record has `error`); 2 on usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from posttrain.bench.grpo_step_trainers import build, knobs

PATHS = ("trl", "posttrain")


def variants(args: argparse.Namespace) -> dict[str, list[str]]:
    """`--variant NAME:KEY=VALUE` options grouped by name, in order."""
    out: dict[str, list[str]] = {}
    for item in args.variant or []:
        name, _, override = item.partition(":")
        out.setdefault(name, []).append(override)
    return out


def overrides(args: argparse.Namespace) -> list[str]:
    out = [
        f"+experiment={args.experiment}",
        f"model={args.model}",
        f"trainer.per_device_batch_size={args.batch}",
        f"algo.trl.num_generations={args.num_generations}",
        f"algo.trl.max_completion_length={args.completion_length}",
        f"model.lora.enabled={args.train == 'lora'}",
        f"trainer.max_steps={args.warmup + args.steps}",
        "trainer.progress_bar=false",
        "trainer.save_steps=1000000000",  # no checkpoint inside the timed steps (the anchor saves none either)
        "algo.heldout=0",
        # one generation batch per step, as in TRL's step (the make-train preset refills a step up to twice)
        "algo.dynamic_sampling.enabled=false",
    ]
    if args.seed is not None:
        out.append(f"seed={args.seed}")
    if args.path == "trl":  # TRL's defaults: torch's threads; a tiny model instance built in fp32
        out += ["hw.threads=null", "model.dtype=float32"]
    out += list(args.set or [])
    if args.path and args.path.startswith("posttrain:"):
        out += variants(args)[args.path.partition(":")[2]]
    return out


def compose(overrides_: list[str]):
    """The composed config with the hw profile applied, as `posttrain.run.run` trains it: the overrides count as the
    command line's (a GPU profile's default batch does not replace `--batch`)."""
    from posttrain.config.compose import load_config
    from posttrain.hardware import apply_profile
    from posttrain.hardware.profile import override_keys

    cfg = load_config(overrides_)
    apply_profile(cfg, overrides=override_keys(overrides_))
    return cfg


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from posttrain.bench.step_timer import PHASES, StepTimer
    from posttrain.callbacks import read_metrics

    cfg = compose(overrides(args))  # applies the hw profile, `hw.threads` included
    if args.threads:  # the command line wins over the profile, for every path alike
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="grpo_step_") as tmp:
        trainer = build(args.path.partition(":")[0], cfg, Path(tmp))
        heldout: dict[str, Any] = {}
        if args.heldout:
            heldout["before"] = _heldout(cfg, trainer, args.heldout)
        timer = StepTimer.attach(trainer)
        with contextlib.suppress(OSError):  # peak RSS of training: reset the high-water mark once the model is built
            Path("/proc/self/clear_refs").write_text("5")
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
        rewards = [m.get("reward") for m in read_metrics(Path(tmp) / "metrics.jsonl") if "reward" in m]
        if args.heldout:
            heldout["after"] = _heldout(cfg, trainer, args.heldout)
    steps = timer.steps[args.warmup :]
    mean = {k: statistics.fmean(s[k] for s in steps) for k in ("total", *PHASES)}  # means: the split adds up
    gen_s = sum(s["generation"] for s in steps)
    return {
        "path": args.path,
        "step_s": mean["total"],
        "step_s_median": statistics.median(s["total"] for s in steps),
        "cpu_s": statistics.fmean(s["cpu_s"] for s in steps),
        "split_s": {p: mean[p] for p in PHASES},
        "gen_tokens_per_s": sum(s["completion_tokens"] for s in steps) / gen_s if gen_s else None,
        "peak_rss_mib": _vm_kib("VmHWM") / 1024,
        "peak_cuda_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "steps": steps,
        "train_s": train_s,
        "rewards": rewards,
        "knobs": knobs(trainer),
        **({"heldout": heldout} if heldout else {}),
    }


def _heldout(cfg, trainer, n: int) -> dict[str, Any]:
    """Greedy accuracy of the trainer's model on the first `n` test problems, as `train.py` scores it."""
    from omegaconf import open_dict

    from posttrain.algos.grpo.heldout import heldout_accuracy

    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.algo.heldout = n
    model = trainer.accelerator.unwrap_model(trainer.model)
    was_training = model.training
    model.eval()
    try:
        return heldout_accuracy(cfg, model, trainer.processing_class, None, "bench")
    finally:
        model.train(was_training)


def _run_worker(path: str, argv: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "posttrain.bench.grpo_step", "--worker", "--path", path, *argv]
    before = _loadavg()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"path": path, "error": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}
    return {**json.loads(lines[-1]), "loadavg": [before, _loadavg()]}


def summarize(runs: dict[str, list[dict[str, Any]]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per path: its best round (smallest mean step time) and every round's mean."""
    out, best = [], {}
    for path, rounds in runs.items():
        ok = [r for r in rounds if "error" not in r]
        rec: dict[str, Any] = {"bench": "grpo_step", "path": path, **config}
        if not ok:
            rec["error"] = rounds[-1].get("error") if rounds else "no rounds"
            out.append(rec)
            continue
        b = best[path] = min(ok, key=lambda r: r["step_s"])
        rec.update(
            step_s=round(b["step_s"], 3),
            step_s_rounds=[round(r["step_s"], 3) for r in ok],
            cpu_s=round(b["cpu_s"], 3),
            cpu_s_rounds=[round(r["cpu_s"], 3) for r in ok],
            split_s={k: round(v, 3) for k, v in b["split_s"].items()},
            gen_tokens_per_s=round(b["gen_tokens_per_s"], 1) if b["gen_tokens_per_s"] else None,
            peak_rss_mib=round(max(r["peak_rss_mib"] for r in ok), 1),
            peak_cuda_gib=max((r["peak_cuda_gib"] for r in ok if r.get("peak_cuda_gib") is not None), default=None),
            knobs=b["knobs"],
            rewards=[r["rewards"] for r in ok],
            loadavg=[r["loadavg"] for r in ok],
        )
        if "heldout" in b:
            before, after = b["heldout"]["before"], b["heldout"]["after"]
            rec.update(
                heldout_acc_before=before["acc"],
                heldout_acc_after=after["acc"],
                heldout_gain=round(after["acc"] - before["acc"], 4),
                heldout_n=after["n"],
                heldout_correct=after["correct"],
            )
        out.append(rec)
    if "trl" in best:
        for rec in out:
            if rec["path"] in best:
                rec["ratio_vs_trl"] = round(best[rec["path"]]["step_s"] / best["trl"]["step_s"], 3)
                steps: list[float] = [r["step_s"] for r in runs[rec["path"]] if "error" not in r]
                anchor: list[float] = [r["step_s"] for r in runs["trl"] if "error" not in r]
                rec["ratio_vs_trl_median"] = round(statistics.median(steps) / statistics.median(anchor), 3)
                cpu = {p: min(r["cpu_s"] for r in runs[p] if "error" not in r) for p in (rec["path"], "trl")}
                rec["cpu_ratio_vs_trl"] = round(cpu[rec["path"]] / cpu["trl"], 3)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m posttrain.bench grpo_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--experiment", default="grpo_smollm2_add", help="the +experiment preset both paths start from")
    p.add_argument("--model", default="smollm2_135m")
    p.add_argument("--batch", type=int, default=8, help="completions per step (prompts x generations)")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--completion-length", type=int, default=16)
    p.add_argument("--train", choices=("lora", "full"), default="lora")
    p.add_argument("--steps", type=int, default=6, help="timed optimizer steps per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed optimizer steps first (compilation, allocator)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--paths", default=",".join(PATHS), help="comma list of: trl, posttrain")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=None, help="the run seed (default: the preset's)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="extra config override (every path)")
    p.add_argument(
        "--variant", action="append", metavar="NAME:KEY=VALUE", help="posttrain:NAME, posttrain with this override"
    )
    p.add_argument("--heldout", type=int, default=0, help="score each round's model on N test problems before/after")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    paths = [x for x in args.paths.split(",") if x]
    if not paths or set(paths) - set(PATHS) or len(set(paths)) != len(paths):
        p.error(f"--paths {args.paths!r}: a comma list of distinct names from {', '.join(PATHS)}")
    for name in ("steps", "rounds", "batch", "num_generations", "completion_length"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.threads < 0 or args.heldout < 0:
        p.error("--warmup, --threads and --heldout must be >= 0")
    if args.batch % args.num_generations:
        p.error(f"--batch {args.batch} must be a multiple of --num-generations {args.num_generations}")
    for item in args.variant or []:
        name, sep, override = item.partition(":")
        if not name or not sep or "=" not in override:
            p.error(f"--variant {item!r}: NAME:KEY=VALUE")
    paths += [f"posttrain:{name}" for name in variants(args)]
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    config = {
        "model": args.model,
        "batch": args.batch,
        "num_generations": args.num_generations,
        "completion_length": args.completion_length,
        "train": args.train,
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "seed": args.seed,
        "heldout": args.heldout,
        "set": args.set or [],
        "variants": variants(args),
    }
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
    start = time.time()
    for _ in range(args.rounds):
        for path in paths:  # alternating: drifting load hits every path alike
            runs[path].append(_run_worker(path, argv))
            progress = {k: v for k, v in runs[path][-1].items() if k != "steps"}
            print(json.dumps({"progress": progress, "elapsed_s": round(time.time() - start)}), file=sys.stderr)
    failed = False
    for rec in summarize(runs, config):
        failed |= "error" in rec
        print(json.dumps(rec), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
