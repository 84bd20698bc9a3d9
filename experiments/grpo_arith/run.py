"""Experiment: GRPO with an exact-answer (math-verify) reward on a tiny random model.

    python experiments/grpo_arith/run.py            # both conditions: train, evaluate before/after, report

Two conditions of `+experiment=grpo_arith_tiny`: the exact-answer reward alone, and the same plus a 0.5-weighted
format reward (`numeric_answer`: the answer is one number). Each trains into experiments/grpo_arith/run_<name>/
(git-ignored), is evaluated before/after on held-out problems with `mode=eval`, and the script writes
metrics_<name>.jsonl and results.json next to this file (git-ignored), then `report.py --collect`: results/eval.csv,
results/steps.csv, results/report.md and results/reward_curve.png.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONDITIONS = {
    "math": [],
    "math+format": ["algo.rewards=[{name: math, weight: 1.0}, {name: numeric_answer, weight: 0.5}]"],
}


def train_py(run: Path, *overrides: str) -> dict:
    cmd = [sys.executable, str(ROOT / "train.py"), "+experiment=grpo_arith_tiny", f"hydra.run.dir={run}", *overrides]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def constant_answer_baseline() -> dict[str, float]:
    """Reward of always answering the most frequent training answer, on the held-out problems."""
    from collections import Counter

    from posttrain.algos.grpo.evaluate import HELD_OUT_SEED
    from posttrain.config.compose import load_config
    from posttrain.data.rlvr import generate_arithmetic
    from posttrain.rewards.math import is_correct

    cfg = load_config(["+experiment=grpo_arith_tiny"])
    params = dict(cfg.data.params)
    train = generate_arithmetic(cfg.data.num_train, seed=cfg.data.seed, **params)
    mode = Counter(train["answer"]).most_common(1)[0][0]
    held = generate_arithmetic(cfg.data.num_eval, seed=cfg.data.seed + HELD_OUT_SEED, **params)
    return {"answer": mode, "reward": sum(is_correct(mode, a) for a in held["answer"]) / len(held)}


def run_condition(name: str, overrides: list[str]) -> tuple[dict, list[dict]]:
    run = HERE / f"run_{name.replace('+', '_')}"
    shutil.rmtree(run, ignore_errors=True)
    before = train_py(run, "mode=eval", "eval.checkpoint=init", *overrides)
    trained = train_py(run, *overrides)
    after = train_py(run, "mode=eval", *overrides)
    out = HERE / f"metrics_{name.replace('+', '_')}.jsonl"
    shutil.copy(run / "metrics.jsonl", out)
    metrics = [json.loads(line) for line in out.read_text().splitlines()]
    result = {
        "eval_math_before": before["eval_math"],
        "eval_math_after": after["eval_math"],
        "train_math_first10": sum(m["rewards/math/mean"] for m in metrics[:10]) / 10,
        "train_math_last10": sum(m["rewards/math/mean"] for m in metrics[-10:]) / 10,
        "train_runtime_s": trained["runtime_s"],
        "eval_prompts": before["eval_prompts"],
    }
    for key in ("eval_numeric_answer",):
        if key in before:
            result[f"{key}_before"], result[f"{key}_after"] = before[key], after[key]
    return result, metrics


def main() -> None:
    results = {}
    for name, overrides in CONDITIONS.items():
        results[name], _ = run_condition(name, overrides)
    results["constant_answer_baseline"] = constant_answer_baseline()
    (HERE / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results))
    subprocess.run([sys.executable, str(HERE / "report.py"), "--collect"], check=True)  # the CSVs, the table, the plot


if __name__ == "__main__":
    main()
