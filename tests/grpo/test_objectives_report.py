"""experiments/grpo_objectives: the report's gains, t intervals and pairing against the preset each arm changed,
on summaries written here (the runs themselves are the experiment's)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import experiment_script

HERE = Path(__file__).resolve().parents[2] / "experiments" / "grpo_objectives"


def _module(name: str):
    return experiment_script(HERE / f"{name}.py")


def test_arms_pair_with_the_preset_they_changed():
    run = _module("run")
    assert run.ARMS["preset"] == [] and run.base_arm("dapo") == "lr5e-4" and run.base_arm("lr5e-4") == "preset"
    assert run.base_arm("lr2e-4_dynamic_sampling") == "preset"
    today = "bf16_copy_dynamic_sampling_steps75"
    assert run.base_arm("today_lr3e-4") == today and run.base_arm("today_cosine_lr4e-4_steps95") == today
    assert run.base_arm(today) == "preset"
    assert run.seeds("0-2,4") == [0, 1, 2, 4]
    # the make-train arm pairs with the all-linear preset it changed only in its attention's rounding
    assert run.base_arm(run.INVARIANT_ARM) == run.ALL_LINEAR_ARM == run.base_arm("p_all_linear_lr2e-4_r32")
    # the p_inv_* arms, today's make-train arm among them, are single changes on the thread-invariant preset
    assert run.base_arm("p_inv_digits0.25") == run.base_arm(run.CDF_ARM) == run.INVARIANT_ARM
    # the p_cdf_* arms are single changes on the inverse-CDF preset, today's make-train arm
    assert run.MAKE_TRAIN_ARM == run.CDF_ARM and run.base_arm("p_cdf_upfront2") == run.CDF_ARM
    assert run.ARMS["p_cdf_upfront2"] == [*run.ARMS[run.CDF_ARM], "algo.dynamic_sampling.upfront_rounds=2"]


def test_the_make_train_arm_is_the_preset(compose):
    """`make train` trains the make-train arm's configuration, so its run is that arm's seed 0: the arm's overrides
    change nothing the preset sets (the rollout backend, sampler and attention are the hw profile's choices, pinned by
    the arm for CPUs without bf16 units)."""
    run = _module("run")
    profile_keys = {"backend", "sampler"}

    def recipe(*overrides: str) -> dict:
        cfg = OmegaConf.to_container(compose("+experiment=grpo_smollm2_add", *overrides), resolve=True)
        cfg["algo"]["generation"] = {k: v for k, v in cfg["algo"]["generation"].items() if k not in profile_keys}
        return {key: cfg[key] for key in ("algo", "trainer", "data")} | {"lora": cfg["model"]["lora"]}

    preset = recipe()
    assert preset == recipe(*run.overrides(run.MAKE_TRAIN_ARM))
    assert preset != recipe(*run.overrides("p_cdf_upfront2"))  # the test can tell arms apart


def test_bf16_arms_keep_the_attention_they_ran_with():
    """bf16 arms from before hw=cpu's thread-invariant attention pin plain eager; fp32 arms and the arms that choose
    their attention are left as they are."""
    run = _module("run")
    attention = {arm: [o for o in run.overrides(arm) if o.startswith("model.attn_implementation=")] for arm in run.ARMS}
    assert attention[run.ALL_LINEAR_ARM] == attention["today_bf16_4prompts_lr3e-4"] == [run.OLD_BF16_ATTENTION]
    assert attention["preset"] == attention["dapo"] == []  # fp32: hw=cpu's sdpa, as they ran
    assert (
        attention[run.INVARIANT_ARM]
        == attention[run.CDF_ARM]
        == attention["p_cdf_upfront2"]
        == ["model.attn_implementation=eager_thread_invariant"]
    )


def test_arms_keep_the_sampler_they_ran_with():
    """Every arm from before hw=cpu's inverse-CDF sampler pins torch.multinomial; the inverse-CDF arm (today's
    make-train arm) and the arms on it (`p_cdf_*`) choose their own."""
    run = _module("run")
    sampler = {arm: [o for o in run.overrides(arm) if o.startswith("algo.generation.sampler=")] for arm in run.ARMS}
    on_cdf = [arm for arm in run.ARMS if arm == run.CDF_ARM or arm.startswith("p_cdf_")]
    assert len(on_cdf) >= 2 and all(sampler[arm] == ["algo.generation.sampler=inverse_cdf"] for arm in on_cdf)
    assert all(v == [run.OLD_SAMPLER] for arm, v in sampler.items() if arm not in on_cdf)


def test_report_table(tmp_path, monkeypatch, capsys):
    report = _module("report")
    after = {"preset": [0.4, 0.5, 0.45], "lr5e-4": [0.3, 0.1, 0.35], "dapo": [0.2, 0.3]}
    for arm, values in after.items():
        for seed, acc in enumerate(values):
            folder = tmp_path / arm / f"seed{seed}"
            folder.mkdir(parents=True)
            summary = {"heldout_acc_before": 0.1, "heldout_acc_after": acc, "runtime_s": 100.0 + seed}
            (folder / "summary.json").write_text(json.dumps(summary))
    answers = [
        ("What is 12 + 30? Answer with just the number.", 1.0),
        ("What is 40 - 12? Answer with just the number.", 0.0),
    ]
    for seed, correct in ((0, (1.0, 0.0)), (1, (0.0, 1.0))):  # preset, + right on seed 0 and - right on seed 1
        rows = [{"prompt": [{"role": "user", "content": q}], "correct": c} for (q, _), c in zip(answers, correct)]
        rows.append(
            {"prompt": [{"role": "user", "content": "What is 50 + 1? Answer with just the number."}], "correct": 1.0}
        )
        (tmp_path / "preset" / f"seed{seed}" / "heldout_after.jsonl").write_text("\n".join(map(json.dumps, rows)))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["report.py", "--plot", str(tmp_path / "gains.png")])
    report.main()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()}
    mean, lo, hi = report.ci([0.3, 0.4, 0.35])
    # the preset's gains 0.3, 0.4, 0.35: sd 0.05, half-width t(0.975, 2) * sd / sqrt(3)
    assert mean == pytest.approx(0.35) and hi - mean == pytest.approx(4.302653 * 0.05 / math.sqrt(3), rel=1e-5)
    assert lo == pytest.approx(2 * mean - hi)
    assert rows["preset"][1] == "0,1,2" and rows["preset"][4].startswith("+0.350 [")
    # addition: 3 right of 4 answers over seeds 0-1 (seed 2 wrote none); subtraction: 1 of 2
    assert rows["preset"][3] == "0.75 / 0.50" and rows["dapo"][3] == "nan / nan"
    # dapo pairs with lr5e-4 on seeds 0-1: (0.1 - 0.2, 0.2 - 0.0) -> mean +0.050
    assert rows["dapo"][6].startswith("+0.050 [") and rows["dapo"][6].endswith("vs lr5e-4 (n=2)")
    assert rows["lr5e-4"][6].endswith("vs preset (n=3)") and rows["lr5e-4"][5] == "+0.000"
    assert (tmp_path / "gains.png").stat().st_size > 0
