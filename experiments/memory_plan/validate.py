"""Measured vs planned peak memory on CPU: GRPO runs of random-init Llama-shaped models through `train.py`.

    python experiments/memory_plan/validate.py            # all sizes, LoRA and full; prints a markdown table
    python experiments/memory_plan/validate.py --only M-lora

Each case composes the plan of its overrides in this interpreter (`train.py ... mode=plan`'s JSON: peak_gib) and
runs the same overrides with `mode=train` in a fresh process whose peak resident set size (ru_maxrss of the
child) is the measurement. Save the printout (`| tee results/NAME.txt`, git-ignored) and merge its JSON lines into
results/rss.csv and results/report.md with `python experiments/memory_plan/report.py --collect results/NAME.txt`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3

# Llama-shaped sizes (random init, byte tokenizer, 32k vocabulary rows)
SIZES = {
    "S": dict(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
    ),
    "M": dict(
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
    ),
    "L": dict(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
    ),
}
COMMON = [
    "model=tiny_llama",
    "hw=cpu",
    "model.arch.vocab_size=32000",
    "model.arch.max_position_embeddings=1024",
    "algo.max_prompt_length=64",
    "algo.trl.max_completion_length=64",
    "algo.trl.num_generations=8",
    "trainer.per_device_batch_size=16",
    "trainer.max_steps=2",
    "trainer.save_steps=0",
    "trainer.progress_bar=false",
]

_WRAP = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stderr.write(r.stderr[-3000:] if r.returncode else ''); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, r.returncode)"
)


def overrides(size: str, lora: bool) -> list[str]:
    arch = [f"model.arch.{k}={v}" for k, v in SIZES[size].items()]
    # full fine-tuning with beta=0: TRL 1.16 re-creates a reference model from the hub id when beta > 0 and no
    # PEFT is used, which the offline random models don't have
    return COMMON + arch + [f"model.lora.enabled={str(lora).lower()}"] + ([] if lora else ["algo.trl.beta=0"])


def planned(args: list[str]) -> dict:
    """The plan's JSON summary for `args`, as `train.py ... mode=plan` prints it (composed here: no interpreter)."""
    from posttrain.config.compose import load_config
    from posttrain.hardware import apply_profile, plan_summary
    from posttrain.hardware.profile import override_keys

    cfg = load_config(args)
    apply_profile(cfg, overrides=override_keys(args))
    return plan_summary(cfg)[1]


def measured(args: list[str]) -> float:
    """Peak RSS in bytes of `train.py args` (mode=train, checkpoint saving off), in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(ROOT / "train.py"), *args, f"hydra.run.dir={tmp}/run"]
        out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True, cwd=ROOT)
    rss, rc = out.stdout.split()
    if int(rc):
        raise RuntimeError(f"training failed ({rc}): {out.stderr}")
    return float(rss)


def case(size: str, lora: bool) -> dict:
    args = overrides(size, lora)
    plan = planned(args)
    rss = measured(args)
    return {
        "case": f"{size}-{'lora' if lora else 'full'}",
        "params_total": plan["params_total"],
        "params_trainable": plan["params_trainable"],
        "planned_gib": plan["peak_gib"],
        "measured_gib": round(rss / GIB, 3),
        "error": round(plan["peak_gib"] / (rss / GIB) - 1, 4),
        "components_gib": plan["components_gib"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None, help="cases like M-lora S-full")
    ns = parser.parse_args()
    cases = [(s, lo) for s in SIZES for lo in (True, False)]
    if ns.only:
        cases = [(s, lo) for s, lo in cases if f"{s}-{'lora' if lo else 'full'}" in ns.only]
    rows = []
    for size, lora in cases:
        row = case(size, lora)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| case | params | trainable | planned GiB | measured peak RSS GiB | plan error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['params_total'] / 1e6:.1f}M | {r['params_trainable'] / 1e6:.2f}M | "
            f"{r['planned_gib']:.3f} | {r['measured_gib']:.3f} | {r['error'] * 100:+.1f}% |"
        )


if __name__ == "__main__":
    main()
