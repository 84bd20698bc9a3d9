"""`python -m posttrain.bench grpo_step`: the per-phase step timer, the anchor's configuration, the summary's ratio
and the command line (tiny_llama; the SmolLM2 numbers are in experiments/grpo_step/)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posttrain.bench import grpo_step, grpo_step_trainers
from posttrain.bench.step_timer import PHASES, StepTimer

SLEEP = {"generation": 0.06, "scoring": 0.03, "rewards": 0.02, "prepare": 0.01, "loss": 0.05, "opt": 0.04, "log": 0.02}


class FakePlainTrainer:
    """The call structure of an HF Trainer without generation (D2L, contrastive) around optimizer steps."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, cb):
        self.callbacks.append(cb)

    def _prepare_inputs(self, batch):
        return batch

    def training_step(self, model, inputs, n):
        self._prepare_inputs(inputs)
        time.sleep(SLEEP["loss"])

    def _maybe_log_save_evaluate(self, *args):
        pass

    def train(self, steps: int = 1):
        for _ in range(steps):
            for cb in self.callbacks:
                cb.on_step_begin(None, None, None)
            self.training_step(None, None, None)
            time.sleep(SLEEP["opt"])
            for cb in self.callbacks:
                cb.on_step_end(None, None, None)
            self._maybe_log_save_evaluate()
        self._maybe_log_save_evaluate()  # HF's end-of-epoch call: belongs to no step


class FakeTrainer(FakePlainTrainer):
    """... and of TRL's GRPOTrainer inside it, with known durations."""

    def _generate(self, prompts):
        time.sleep(SLEEP["generation"])
        return [[1]] * 2, [[5, 6, 7], [8, 9]], None

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        time.sleep(SLEEP["scoring"])

    def _calculate_rewards(self, *args):
        time.sleep(SLEEP["rewards"])

    def _generate_and_score_completions(self, inputs):
        self._generate(inputs)
        self._get_per_token_logps_and_entropies()  # old log-probs
        self._get_per_token_logps_and_entropies()  # reference log-probs
        self._calculate_rewards()
        time.sleep(SLEEP["prepare"])  # advantages, padding

    def _prepare_inputs(self, batch):
        return self._generate_and_score_completions(batch)

    def training_step(self, model, inputs, n):
        self._prepare_inputs(inputs)
        self._get_per_token_logps_and_entropies()  # the policy pass: loss, not scoring
        time.sleep(SLEEP["loss"] - SLEEP["scoring"])

    def _maybe_log_save_evaluate(self, *args):
        time.sleep(SLEEP["log"])


def test_step_timer_attributes_each_phase():
    trainer = FakeTrainer()
    timer = StepTimer.attach(trainer)
    start = time.perf_counter()
    trainer.train(2)
    wall = time.perf_counter() - start
    assert len(timer.steps) == 2
    expected = {
        "generation": SLEEP["generation"],
        "scoring": 2 * SLEEP["scoring"],
        "rewards": SLEEP["rewards"],
        "loss_backward": SLEEP["loss"],
        "optimizer": SLEEP["opt"],
        "other": SLEEP["prepare"] + SLEEP["log"],
    }
    for step in timer.steps:
        assert step["completion_tokens"] == 5
        assert sum(step[p] for p in PHASES) == pytest.approx(step["total"], abs=1e-9)
        assert 0 <= step["cpu_s"] < 0.05  # sleeping costs no CPU
        for phase, seconds in expected.items():  # sleep overshoots a little, never undershoots
            assert seconds - 1e-3 <= step[phase] <= seconds + 0.02, (phase, step)
    # the end-of-epoch log call is not added to the last step: the steps cover the wall time minus that call only
    assert sum(s["total"] for s in timer.steps) <= wall - SLEEP["log"] + 1e-3


def test_step_timer_on_a_trainer_without_generation():
    trainer = FakePlainTrainer()
    timer = StepTimer.attach(trainer)
    trainer.train()
    (step,) = timer.steps
    assert step["generation"] == step["scoring"] == step["rewards"] == 0.0
    assert SLEEP["loss"] - 1e-3 <= step["loss_backward"] <= SLEEP["loss"] + 0.02
    assert SLEEP["opt"] - 1e-3 <= step["optimizer"] <= SLEEP["opt"] + 0.02


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Both paths on tiny_llama, 2 optimizer steps each, in this process (knobs read before the next build: accelerate's
    state is process-wide, the bench runs each path in its own process)."""
    from posttrain.callbacks import read_metrics

    args = grpo_step.parser().parse_args(["--model", "tiny_llama", "--steps", "2", "--warmup", "0"])
    cfg = grpo_step.compose(grpo_step.overrides(args))
    runs = {}
    for path in grpo_step.PATHS:
        run_dir = tmp_path_factory.mktemp(path)
        trainer = grpo_step_trainers.build(path, cfg, run_dir)
        knobs = grpo_step_trainers.knobs(trainer)
        timer = StepTimer.attach(trainer)
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        runs[path] = (trainer, timer, wall, read_metrics(run_dir / "metrics.jsonl"), knobs)
    return cfg, runs


@pytest.mark.slow
def test_step_timer_on_real_trainers(tiny_runs):
    cfg, runs = tiny_runs
    batch = cfg.trainer.per_device_batch_size
    for path, (_, timer, wall, metrics, _) in runs.items():
        assert len(timer.steps) == 2, path
        for step, logged in zip(timer.steps, metrics, strict=True):
            assert sum(step[p] for p in PHASES) == pytest.approx(step["total"], abs=1e-9)
            assert all(step[p] >= 0 for p in PHASES), (path, step)
            assert step["cpu_s"] > 0
            for phase in ("generation", "loss_backward", "optimizer"):
                assert step[phase] > 0, (path, phase)
            assert step["scoring"] == 0.0  # beta=0, num_iterations=1: TRL skips the old and reference passes
            # the named phases are the step: bookkeeping and logging stay a small remainder
            assert step["other"] < 0.25 * step["total"] + 0.05, (path, step)
            # the tokens counted are the ones TRL logs for that step
            assert step["completion_tokens"] == pytest.approx(logged["completions/mean_length"] * batch)
        assert sum(s["total"] for s in timer.steps) <= wall


@pytest.mark.slow
def test_anchor_is_plain_trl_with_posttrains_recipe(tiny_runs):
    from trl import GRPOTrainer

    from posttrain.algos.grpo.trainer import PosttrainGRPOTrainer

    _, runs = tiny_runs
    anchor, ours = runs["trl"][0], runs["posttrain"][0]
    assert type(anchor) is GRPOTrainer and isinstance(ours, PosttrainGRPOTrainer)
    a, b = anchor.args.to_dict(), ours.args.to_dict()
    assert {k: a[k] for k in grpo_step_trainers.RECIPE_KEYS} == {k: b[k] for k in grpo_step_trainers.RECIPE_KEYS}
    # TRL's defaults stay TRL's: bf16 autocast and gradient checkpointing
    assert runs["trl"][4]["autocast"] == "bf16" and runs["trl"][4]["gradient_checkpointing"]
    assert runs["posttrain"][4]["autocast"] == "no" and not runs["posttrain"][4]["gradient_checkpointing"]  # hw=cpu
    # both train the same LoRA adapters
    count = {
        p: sum(x.numel() for x in t.model.parameters() if x.requires_grad) for p, t in (("a", anchor), ("b", ours))
    }
    assert count["a"] == count["b"] > 0


def _round(step_s: float, **extra) -> dict:
    return {
        "step_s": step_s,
        "split_s": {p: step_s / len(PHASES) for p in PHASES},
        "gen_tokens_per_s": 10.0,
        "peak_rss_mib": 100.0 + step_s,
        "cpu_s": 2 * step_s,
        "knobs": {},
        "rewards": [0.5],
        "loadavg": [[1.0], [1.0]],
        **extra,
    }


def test_summary_ratio_best_and_median_rounds():
    runs = {"trl": [_round(4.0), _round(3.0), _round(5.0)], "posttrain": [_round(1.8), _round(1.2), _round(1.5)]}
    recs = {r["path"]: r for r in grpo_step.summarize(runs, {"model": "m"})}
    assert recs["trl"]["ratio_vs_trl"] == 1.0
    assert recs["posttrain"]["step_s"] == 1.2 and recs["trl"]["step_s"] == 3.0  # the least disturbed round
    assert recs["posttrain"]["ratio_vs_trl"] == pytest.approx(1.2 / 3.0, abs=1e-3)
    assert recs["posttrain"]["ratio_vs_trl_median"] == pytest.approx(1.5 / 4.0, abs=1e-3)
    assert recs["posttrain"]["cpu_ratio_vs_trl"] == pytest.approx(1.2 / 3.0, abs=1e-3)
    assert recs["posttrain"]["step_s_rounds"] == [1.8, 1.2, 1.5]
    assert recs["posttrain"]["peak_rss_mib"] == 101.8  # the largest of all rounds
    assert recs["posttrain"]["model"] == "m"


def test_summary_failed_path_has_error_and_no_ratio():
    runs = {"trl": [{"path": "trl", "error": ["boom"]}], "posttrain": [_round(1.0)]}
    recs = {r["path"]: r for r in grpo_step.summarize(runs, {})}
    assert recs["trl"]["error"] == ["boom"]
    assert "ratio_vs_trl" not in recs["posttrain"] and recs["posttrain"]["step_s"] == 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--paths", "trl,nope"], "--paths"),
        (["--paths", "trl,trl"], "--paths"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--warmup", "-1"], "--warmup"),
        (["--batch", "6", "--num-generations", "4"], "multiple of --num-generations"),
        (["--train", "qlora"], "invalid choice"),
        (["--variant", "fp32"], "NAME:KEY=VALUE"),
        (["--variant", "fp32:hw.precision"], "NAME:KEY=VALUE"),
    ],
)
def test_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        grpo_step.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_bench_command_tiny(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "posttrain.bench",
            "grpo_step",
            "--model",
            "tiny_llama",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--rounds",
            "1",
            "--seed",
            "3",
            "--heldout",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = {r["path"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    assert set(recs) == {"trl", "posttrain"}
    for r in recs.values():
        assert {"step_s", "split_s", "gen_tokens_per_s", "peak_rss_mib", "ratio_vs_trl", "cpu_s", "knobs"} <= r.keys()
        assert set(r["split_s"]) == set(PHASES)
        assert sum(r["split_s"].values()) == pytest.approx(r["step_s"], abs=0.01)  # means add up (3-digit rounding)
        assert r["gen_tokens_per_s"] > 0 and r["peak_rss_mib"] > 50 and r["seed"] == 3
        assert len(r["rewards"]) == 1 and len(r["rewards"][0]) == 2  # one round, two logged steps
        # held-out accuracy before/after training on the same 3 test problems, outside the timed steps
        assert r["heldout_n"] == 3 and len(r["heldout_correct"]) == 3
        assert r["heldout_acc_after"] == pytest.approx(sum(r["heldout_correct"]) / 3)
        assert r["heldout_gain"] == pytest.approx(r["heldout_acc_after"] - r["heldout_acc_before"], abs=1e-4)
    # both paths start from the same weights: the same greedy answers before training
    assert recs["trl"]["heldout_acc_before"] == recs["posttrain"]["heldout_acc_before"]
    assert recs["trl"]["ratio_vs_trl"] == 1.0
    assert recs["posttrain"]["ratio_vs_trl"] == pytest.approx(
        recs["posttrain"]["step_s"] / recs["trl"]["step_s"], rel=0.01
    )


def test_variant_overrides_reach_only_their_path():
    argv = ["--set", "seed=5", "--variant", "a:hw.precision=bf16", "--variant", "a:kernels=fused", "--variant", "b:x=1"]
    args = grpo_step.parser().parse_args(argv)
    assert grpo_step.variants(args) == {"a": ["hw.precision=bf16", "kernels=fused"], "b": ["x=1"]}
    ours = grpo_step.overrides(grpo_step.parser().parse_args([*argv, "--path", "posttrain:a"]))
    assert ours[-3:] == ["seed=5", "hw.precision=bf16", "kernels=fused"]
    for path in ("trl", "posttrain"):
        plain = grpo_step.overrides(grpo_step.parser().parse_args([*argv, "--path", path]))
        assert plain[-1] == "seed=5" and "kernels=fused" not in plain


def test_bench_batch_is_a_command_line_choice():
    """hw=h200 sets a default batch of 32; the bench's --batch still decides (as it would on train.py's line)."""
    args = grpo_step.parser().parse_args(["--model", "tiny_llama", "--batch", "8", "--set", "hw=h200"])
    cfg = grpo_step.compose(grpo_step.overrides(args))
    assert cfg.hw.name == "h200" and cfg.trainer.per_device_batch_size == 8
