"""`mode=plan` output: a readable table, then one JSON object as the last line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from posttrain.hardware.memory import GIB, Plan, plan
from posttrain.hardware.profile import apply_profile
from posttrain.hardware.suggest import suggest

PHASES = {
    "persistent": "resident",
    "train": "forward/backward",
    "score": "log-prob pass",
    "generate": "generation",
    "step": "optimizer step",
    "save": "checkpoint save",
    "forward": "every forward",
    "backward+step": "backward + step",
}


def profile_plan(overrides: Sequence[str], suggest_fixes: bool = True) -> tuple[Plan, dict[str, Any]]:
    """`python train.py <overrides> mode=plan`: compose, apply the hw profile, plan and summarize (the suggestion
    left empty without `suggest_fixes`)."""
    from posttrain.config.compose import load_config, override_keys

    cfg = load_config(list(overrides))
    apply_profile(cfg, overrides=override_keys(list(overrides)))
    return plan_summary(cfg, overrides, suggest_fixes)


def plan_summary(
    cfg: DictConfig, overrides: Sequence[str] | None = None, suggest_fixes: bool = True
) -> tuple[Plan, dict[str, Any]]:
    """The plan and its JSON summary (params_total, params_active, params_trainable, peak_gib, ...). `overrides`: the
    command line `cfg` was composed from (default: Hydra's), which the suggestion re-plans on other profiles."""
    result = plan(cfg)
    c = result.counts
    summary = {
        "model": cfg.model.name,
        "algo": cfg.algo.name,
        "hw": cfg.hw.name,
        "kernels": cfg.kernels.backend,
        "params_total": c.total,
        "params_active": c.active,
        "params_trainable": c.trainable + result.work.extra_trainable,
        "train_mode": result.extra["train_mode"],
        "peak_gib": round(result.peak_bytes / GIB, 3),
        # the peak without hw.overhead_gib: what torch.cuda.max_memory_allocated measures
        "tensor_gib": round(result.tensor_bytes / GIB, 3),
        "peak_phase": result.peak_phase,
        "device_gib": float(cfg.hw.device_gib),
        "num_devices": int(cfg.hw.num_devices),
        "fits": result.fits,
        "suggestion": suggest(cfg, result, overrides) if suggest_fixes else "",
        "components_gib": {i.name: round(i.bytes / GIB, 4) for i in result.items},
    }
    return result, summary


def format_table(cfg: DictConfig, result: Plan, summary: dict[str, Any]) -> str:
    c, w, hw = result.counts, result.work, cfg.hw
    lines = [
        f"memory plan: model={cfg.model.name} algo={cfg.algo.name} hw={hw.name} kernels={summary['kernels']} "
        f"({hw.num_devices} x {hw.device}, {hw.device_gib:g} GiB each, {hw.precision})",
        f"  params: total {c.total / 1e9:.3f}B | active {c.active / 1e9:.3f}B | "
        f"trainable {summary['params_trainable'] / 1e6:.3f}M ({summary['train_mode']})",
        f"  batch: {w.note}; sequence {w.seq_len} tokens",
        f"  {'component':<28}{'GiB':>10}  {'phase':<17}note",
    ]
    for item in result.items:
        lines.append(f"  {item.name:<28}{item.bytes / GIB:>10.3f}  {PHASES[item.phase]:<17}{item.note}")
    verdict = "fits" if result.fits else "DOES NOT FIT"
    lines.append(
        f"  {'peak (' + PHASES[result.peak_phase] + ')':<28}{result.peak_bytes / GIB:>10.3f}  "
        f"of {hw.device_gib:g} GiB: {verdict}"
    )
    if summary["suggestion"]:
        lines.append(f"  suggestion: {summary['suggestion']}")
    return "\n".join(lines)


def plan_command(cfg: DictConfig) -> dict[str, Any]:
    """Print the table and, as the last line, the JSON summary; returns the summary (exit 0 either way).
    `cfg` has its hw profile applied (`posttrain.hardware.apply_profile`)."""
    from posttrain.dist import launch_hint

    result, summary = plan_summary(cfg)
    launch = launch_hint(cfg)
    if launch:
        summary["launch"] = launch
    print(format_table(cfg, result, summary))
    if launch:
        print(f"  launch: {launch}")
    print(json.dumps(summary), flush=True)
    return summary
