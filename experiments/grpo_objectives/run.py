"""Issue 25's arms on the `make train` configuration, each seed one `python train.py` run (resumable: a run whose
summary.json exists is skipped).

    python experiments/grpo_objectives/run.py --arms preset,all_linear --seeds 0-4 [--jobs 2 --threads 1]
    python experiments/grpo_objectives/run.py --list

Every run: `python train.py +experiment=grpo_smollm2_add <BASE, then the arm's overrides> seed=S`, into
experiments/grpo_objectives/results/<arm>/seed<S>/ (config.yaml, metrics.jsonl, summary.json with the held-out
accuracy before and after, the run's log); checkpoints are not kept. `--jobs N` runs N at a time, each with
`hw.threads=T` (on 2 cores: `--jobs 2 --threads 1`; fp32 results do not depend on the thread count). The run dirs
stay out of git: `python experiments/grpo_objectives/report.py --collect` compacts them into results/runs.csv and
results/heldout.csv, the files the report reads.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
TEST_RESULTS = Path(__file__).resolve().parent / "test_results"  # the TEST_ARMS' runs and tables, kept apart
DIGITS = (
    "algo.rewards=[{name:math,weight:1.0,kwargs:{last_number:true}},{name:digit_match,weight:0.5},"
    "{name:numeric_answer,weight:0.0}]"
)
OLD = "trainer.lr=5e-4"  # the preset's lr before this experiment: the single-change arms ran on it
# The make-train preset the arms were defined on (lr 2e-4, 60 steps of 2 prompts x 4, sampling from the fp32 policy,
# fp32 training as hw=cpu chose on this CPU until 2026-11-26, LoRA on the attention projections): every arm starts
# from it, so that a later preset (bf16_copy_dynamic_sampling_steps75 on 2026-11-26, today_bf16_4prompts_lr3e-4 that
# evening, p_all_linear_lr2e-4 since that night) does not change what an arm's name means.
BASE = [
    "algo.generation.backend=hf",
    "algo.dynamic_sampling.enabled=false",
    "trainer.max_steps=60",
    "trainer.per_device_batch_size=8",
    "trainer.lr=2e-4",
    "hw.precision=fp32",
    "model.lora.targets=attention",
]
TODAY = [  # BASE turned back into the preset of 2026-11-26 (before the last one)
    "algo.generation.backend=bf16_copy",
    "algo.dynamic_sampling.enabled=true",
    "algo.dynamic_sampling.max_rounds=2",
    "trainer.max_steps=75",
]
# the make-train preset of 2026-11-26 evening
PRESET = [*TODAY, "trainer.per_device_batch_size=16", "trainer.lr=3e-4", "hw.precision=bf16"]
# the make-train preset of 2026-11-26 night (arm ALL_LINEAR_ARM): PRESET with LoRA on every linear layer at lr 2e-4
ALL_LINEAR_ARM = "p_all_linear_lr2e-4"
ALL_LINEAR = [*PRESET[:-2], "trainer.lr=2e-4", PRESET[-1], "model.lora.targets=all_linear"]
# the make-train preset of 2026-11-27 (night): the same with hw=cpu's bf16 attention whose gradient does not depend on
# the thread count; the `p_inv_*` arms are single changes on it
INVARIANT_ARM = "p_all_linear_lr2e-4_invariant"
# the make-train preset since 2026-11-27: INVARIANT_ARM with hw=cpu's inverse-CDF sampler, so that make train (two
# threads) is this arm's seed 0 (one thread) step for step; the `p_cdf_*` arms are single changes on it
CDF_ARM = "p_inv_inverse_cdf"
MAKE_TRAIN_ARM = CDF_ARM
# what hw=cpu's bf16 training used before 2026-11-27 (ATen's softmax backward, thread-dependent); `overrides` pins it
# for every bf16 arm that does not choose its attention
OLD_BF16_ATTENTION = "model.attn_implementation=eager"
INVARIANT = [*ALL_LINEAR, "model.attn_implementation=eager_thread_invariant"]  # INVARIANT_ARM's overrides
# how the rollout copy drew its tokens before hw=cpu's inverse_cdf (2026-11-27); `overrides` pins it for every arm that
# does not choose its sampler
OLD_SAMPLER = "algo.generation.sampler=multinomial"


def _changed(arm: list[str], *changes: str) -> list[str]:
    """`arm`'s overrides with `changes` in place of those for the same keys."""
    keys = {c.split("=", 1)[0] for c in changes}
    return [o for o in arm if o.split("=", 1)[0] not in keys] + list(changes)


CDF = _changed(INVARIANT, "algo.generation.sampler=inverse_cdf")  # CDF_ARM's overrides


ARMS: dict[str, list[str]] = {
    "preset": [],  # lr 2e-4 since this experiment (BASE: the make-train preset from 2026-11-25 to 2026-11-26)
    "lr5e-4": [OLD],  # the preset before it
    "all_linear": [OLD, "model.lora.targets=all_linear"],
    "all_linear_lr2e-4": ["model.lora.targets=all_linear", "trainer.lr=2e-4"],
    "all_linear_lr1e-4": ["model.lora.targets=all_linear", "trainer.lr=1e-4"],
    "bf16_copy": [OLD, "algo.generation.backend=bf16_copy"],
    "bf16_copy_corrected": [OLD, "algo.generation.backend=bf16_copy", "algo.sampler_correction=true"],
    "dynamic_sampling": [OLD, "algo.dynamic_sampling.enabled=true"],
    "dapo": [OLD, "algo.trl.loss_type=dapo"],
    "cispo": [OLD, "algo.trl.loss_type=cispo", "algo.trl.epsilon_high=5.0"],  # ScaleRL's recommended cap (TRL's docs)
    "sapo": [OLD, "algo.trl.loss_type=sapo"],
    # not in the list: how far the preset goes with twice the steps, and with twice the group size
    "steps120": [OLD, "trainer.max_steps=120"],
    "gen8": [OLD, "algo.trl.num_generations=8", "trainer.per_device_batch_size=16"],
    "gen8_lr2e-4": ["algo.trl.num_generations=8", "trainer.per_device_batch_size=16"],  # today's preset, 8 per group
    "rank64": ["model.lora.r=64", "model.lora.alpha=128"],  # today's preset, 4x the LoRA rank (same alpha / r)
    "lr2e-4_steps120": ["trainer.lr=2e-4", "trainer.max_steps=120"],
    "lr2e-4_dynamic_sampling": ["trainer.lr=2e-4", "algo.dynamic_sampling.enabled=true"],
    "lr2e-4_bf16_copy": ["trainer.lr=2e-4", "algo.generation.backend=bf16_copy"],
    "lr2e-4_bf16_copy_corrected": [
        "trainer.lr=2e-4",
        "algo.generation.backend=bf16_copy",
        "algo.sampler_correction=true",
    ],
    # towards make train >= 0.60 in 10 minutes: faster rollouts (the merged bf16 copy) buy steps or refills
    "lr3e-4": ["trainer.lr=3e-4"],
    "bf16_copy_steps90": ["algo.generation.backend=bf16_copy", "trainer.max_steps=90"],
    "bf16_copy_dynamic_sampling": ["algo.generation.backend=bf16_copy", "algo.dynamic_sampling.enabled=true"],
    "lr3e-4_bf16_copy_dynamic_sampling": [
        "trainer.lr=3e-4",
        "algo.generation.backend=bf16_copy",
        "algo.dynamic_sampling.enabled=true",
    ],
    "lr3e-4_bf16_copy_steps90": ["trainer.lr=3e-4", "algo.generation.backend=bf16_copy", "trainer.max_steps=90"],
    # the bf16 copy's steps cost 2.7 s against 3.6 s at two threads: 150 steps fit make train's 10 minutes
    "bf16_copy_steps150": ["algo.generation.backend=bf16_copy", "trainer.max_steps=150"],
    "bf16_copy_dynamic_sampling_steps75": TODAY,  # the make-train preset since 2026-11-26
    # subtraction (a third of the held-out problems) stays at ~0.06: its groups are almost all zero-reward, so
    # nothing is learned from them; digit_match gives them partial credit (math stays the held-out score)
    "digits_bf16_copy_steps150": [DIGITS, "algo.generation.backend=bf16_copy", "trainer.max_steps=150"],
    "digits_bf16_copy_dynamic_sampling_steps75": [
        DIGITS,
        "algo.generation.backend=bf16_copy",
        "algo.dynamic_sampling.enabled=true",
        "algo.dynamic_sampling.max_rounds=2",
        "trainer.max_steps=75",
    ],
    # DAPO's generation batch: each refill samples 8 prompts (32 completions) in one batch instead of 2 (8): on a CPU
    # one batch of 32 costs far less than four of 8, and at ~0.2 informative groups per prompt one refill usually fills
    "dynamic_sampling_refill8": [
        "algo.dynamic_sampling.enabled=true",
        "algo.dynamic_sampling.refill_groups=8",
        "algo.dynamic_sampling.max_rounds=2",
    ],
    "bf16_copy_dynamic_sampling_refill8": [
        "algo.generation.backend=bf16_copy",
        "algo.dynamic_sampling.enabled=true",
        "algo.dynamic_sampling.refill_groups=8",
        "algo.dynamic_sampling.max_rounds=2",
    ],
    # today's preset sampling subtraction more widely: dynamic sampling keeps only the groups where one sample is right
    "today_temp0.9": [*TODAY, "algo.trl.temperature=0.9"],
    "today_temp1.0": [*TODAY, "algo.trl.temperature=1.0"],
    # today's preset with 8 samples of one prompt per step instead of 4 of two (same step cost): more groups where a
    # hard subtraction is solved once
    "today_gen8": [*TODAY, "algo.trl.num_generations=8"],
    "today_lr3e-4": [*TODAY, "trainer.lr=3e-4"],
    # the policy's entropy falls from 0.99 to 0.1-0.2 by step 50, after which most groups agree (no gradient): keep
    # it up with Skywork-OR1's adaptive entropy bonus, or take larger steps early and small ones late
    "today_entropy0.3": [*TODAY, "algo.trl.use_adaptive_entropy=true", "algo.trl.entropy_target=0.3"],
    "today_cosine_lr4e-4": [*TODAY, "trainer.lr=4e-4", "trainer.lr_scheduler=cosine", "trainer.warmup_steps=5"],
    "today_cosine_lr6e-4": [*TODAY, "trainer.lr=6e-4", "trainer.lr_scheduler=cosine", "trainer.warmup_steps=5"],
    # each rollout batch taken for two optimizer steps (TRL's num_iterations; max_steps counts optimizer steps): 60
    # rollouts and 120 updates at about today's cost, the clip now binding on the second pass
    "today_iter2_steps120": [*TODAY[:-1], "trainer.max_steps=120", "algo.trl.num_iterations=2"],
    # more subtraction among the training prompts (a third by default; the held-out mix is unchanged)
    "today_sub0.5": [*TODAY, "++data.params.train_op_share=[0.5,0.5]"],
    "today_sub0.67": [*TODAY, "++data.params.train_op_share=[0.33,0.67]"],
    # make train's 10 minutes leave ~2 minutes after today's preset on the 2-core CPU: ~25 more steps at 2 threads
    "today_steps95": [*TODAY[:-1], "trainer.max_steps=95"],  # the steps without the schedule
    "today_cosine_lr4e-4_steps95": [
        *TODAY[:-1],
        "trainer.max_steps=95",
        "trainer.lr=4e-4",
        "trainer.lr_scheduler=cosine",
        "trainer.warmup_steps=5",
    ],
    # bf16 autocast training (fp32 master weights) on a CPU with avx512_bf16 but no AMX: steps cost ~0.7x fp32's
    # (make train 5 min 58 s against 7 min 41 s, same 0.51), which buys more steps or prompts in make train's 10 min
    "today_bf16": [*TODAY, "hw.precision=bf16"],
    "today_bf16_steps110": [*TODAY[:-1], "trainer.max_steps=110", "hw.precision=bf16"],
    "today_bf16_4prompts": [*TODAY, "trainer.per_device_batch_size=16", "hw.precision=bf16"],  # 4 prompts x 4
    "today_bf16_4prompts_lr3e-4": PRESET,
    "today_bf16_6prompts_steps55": [
        *TODAY[:-1],
        "trainer.max_steps=55",
        "trainer.per_device_batch_size=24",
        "hw.precision=bf16",
    ],
    # fewer subtraction prompts in training (a third by default; the held-out mix unchanged): subtraction stays at ~0.1
    # whatever its share, so its prompts may serve better as addition's
    "today_bf16_4prompts_lr3e-4_add0.8": [
        *TODAY,
        "trainer.per_device_batch_size=16",
        "trainer.lr=3e-4",
        "hw.precision=bf16",
        "++data.params.train_op_share=[0.8,0.2]",
    ],
    "today_bf16_rounds4": [*TODAY[:-2], "algo.dynamic_sampling.max_rounds=4", TODAY[-1], "hw.precision=bf16"],
    # on the make-train preset of 2026-11-26 evening (PRESET): more trainable capacity, since addition's carries and
    # subtraction are what the runs miss (the units digit is right in almost every wrong addition)
    ALL_LINEAR_ARM: ALL_LINEAR,
    "p_all_linear": [*PRESET, "model.lora.targets=all_linear"],  # at the attention preset's lr 3e-4
    # all-linear at lr 2e-4 has a noisy last iterate (seed 0: 0.645 at one thread, 0.525 at two): decay the lr to 0 from
    # a higher start, or give it twice the rank
    "p_all_linear_linear_lr3e-4": [*PRESET, "model.lora.targets=all_linear", "trainer.lr_scheduler=linear"],
    "p_all_linear_lr2e-4_r32": [*ALL_LINEAR, "model.lora.r=32", "model.lora.alpha=64"],
    # with trainable MLPs subtraction moves (seed 0: 0.28): give it half the training prompts (a third by default)
    "p_all_linear_lr2e-4_sub0.5": [*ALL_LINEAR, "++data.params.train_op_share=[0.5,0.5]"],
    # sampling at temperature 1.0 (0.7 in the preset): more varied answers to subtraction, which the MLPs can now learn
    "p_all_linear_lr2e-4_temp1.0": [*ALL_LINEAR, "algo.trl.temperature=1.0"],
    # today's preset at the two threads make train uses on this machine (run alone: --jobs 1); bf16 runs part with the
    # thread count (results: the `make train ARGS="seed=S ..."` runs of 2026-11-26, the same overrides)
    "p_all_linear_lr2e-4_threads2": [*ALL_LINEAR, "hw.threads=2"],
    # the one op of a step that depended on the thread count, the attention softmax's backward, made order-fixed
    INVARIANT_ARM: INVARIANT,
    # on it (`p_inv_*`): partial credit per digit place beside the exact-match reward, at a quarter of its weight (at
    # half, on the attention-only preset of 2026-11-26, it raised subtraction and cost addition more)
    "p_inv_digits0.25": [
        *ALL_LINEAR,
        "model.attn_implementation=eager_thread_invariant",
        DIGITS.replace("weight:0.5", "weight:0.25"),
    ],
    # LoRA+ (model.lora.loraplus_lr_ratio): B at the ratio times trainer.lr, A at trainer.lr. B starts at zero, so early
    # on the adapters move with B's steps alone: B faster than today's 2e-4, A slower, within make train's 75 steps
    "p_inv_loraplus4_lr1e-4": _changed(INVARIANT, "trainer.lr=1e-4", "model.lora.loraplus_lr_ratio=4"),
    "p_inv_loraplus16_lr1e-4": _changed(INVARIANT, "trainer.lr=1e-4", "model.lora.loraplus_lr_ratio=16"),
    # the rollout copy drawing each token with one uniform per row instead of torch.multinomial (one exponential per
    # vocabulary entry on a CPU): the same distribution, another random stream, ~a tenth less time per step
    CDF_ARM: CDF,
    # on it (`p_cdf_*`): dynamic sampling's two extra batches generated with the step's own, in one decode of 48 rows
    # (nearly every step needs both: 30.3 of 32 extra generations on average in make train's run): the same picks by
    # the same rule from another random stream. Retired with its option (RETIRED); its runs stay in results/
    "p_cdf_upfront2": _changed(CDF, "algo.dynamic_sampling.upfront_rounds=2"),
    # full fine-tuning on today's recipe (same rollouts, dynamic sampling and steps), its lr searched here on problems
    # 0-199 (issue 62: the full-FT figure of experiments/grpo_smollm2 had lr 1e-5 unsearched, 60 steps, 480 rollouts)
    **{
        f"p_cdf_full_lr{lr}": _changed(CDF, "model.lora.enabled=false", f"trainer.lr={lr}")
        for lr in ("3e-6", "1e-5", "3e-5", "1e-4")
    },
}
# issue 62's final test: problems 200-499 of data=add's test split, which no choice above saw (arms were scored on
# 0-199), on fresh seeds (100-102), once, for today's preset and its main rivals: the attention-only LoRA at its own
# tuned lr (the preset before all-linear, whose gain did not replicate), the same preset without dynamic sampling
# at matched rollouts (its 75 steps drew 3,379 completions on average over seeds 0-4: 211 steps of 16), and full
# fine-tuning at its searched lr
TEST = ["algo.heldout_start=200", "algo.heldout=300"]
TEST_ARMS = {
    "test_preset": [*CDF, *TEST],
    "test_attention_lr3e-4": [*_changed(CDF, "model.lora.targets=attention", "trainer.lr=3e-4"), *TEST],
    # full fine-tuning at the lr searched on problems 0-199 (p_cdf_full_lr*: 3e-6, 1e-5, 3e-5, 1e-4, seeds 0-1;
    # 1e-5 best), on today's recipe: the same rollouts, dynamic sampling and 75 steps as test_preset
    "test_full_lr1e-5": [*_changed(CDF, "model.lora.enabled=false", "trainer.lr=1e-5"), *TEST],
    "test_no_dynamic_sampling_steps211": [
        *_changed(CDF, "algo.dynamic_sampling.enabled=false", "trainer.max_steps=211"),
        *TEST,
    ],
}
ARMS.update(TEST_ARMS)
# arms whose option is gone: reported from results/, no longer runnable
RETIRED = {
    "p_cdf_upfront2": "algo.dynamic_sampling.upfront_rounds was retired (issue 59): no faster, the same learning"
}


def base_arm(arm: str) -> str:
    """The arm an arm's paired difference is taken against: the preset its single change was made on."""
    own = ARMS.get(arm, [])
    if arm in TEST_ARMS:  # the final test's rivals, against today's preset on the same fresh seeds
        return "test_preset"
    if arm.startswith("p_cdf_"):  # variants of the inverse-CDF preset, today's among them
        return CDF_ARM
    if arm.startswith("p_inv_"):  # variants of the thread-invariant preset, today's among them
        return INVARIANT_ARM
    if arm.startswith("p_all_linear") and arm != ALL_LINEAR_ARM:  # variants of the all-linear preset
        return ALL_LINEAR_ARM
    if arm.startswith("p_"):  # the arms on PRESET
        return "today_bf16_4prompts_lr3e-4"
    if OLD in own and arm != "lr5e-4":
        return "lr5e-4"
    today = "bf16_copy_dynamic_sampling_steps75"
    on_today = own[: len(TODAY) - 1] == TODAY[:-1]  # today's rollout options, its 75 steps or another count
    return today if on_today and arm != today else "preset"


def overrides(arm: str) -> list[str]:
    """BASE with the arm's own overrides in place of BASE's for the same keys; bf16 arms that do not choose their
    attention keep the one they ran with (OLD_BF16_ATTENTION), and arms that do not choose their sampler
    torch.multinomial (OLD_SAMPLER)."""
    own = ARMS[arm]
    keys = {o.split("=", 1)[0] for o in own}
    out = [o for o in BASE if o.split("=", 1)[0] not in keys] + own
    if "hw.precision=bf16" in out and "model.attn_implementation" not in keys:
        out.append(OLD_BF16_ATTENTION)
    if "algo.generation.sampler" not in keys:
        out.append(OLD_SAMPLER)
    return out


def seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run(arm: str, seed: int, threads: int, extra: list[str]) -> str:
    out = (TEST_RESULTS if arm in TEST_ARMS else RESULTS) / arm / f"seed{seed}"
    if (out / "summary.json").exists():
        return f"{arm} seed {seed}: done before"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "train.py"), "+experiment=grpo_smollm2_add", *overrides(arm), *extra]
    if not any(o.startswith("hw.threads=") for o in ARMS[arm]):  # an arm may fix its own thread count
        cmd.append(f"hw.threads={threads}")
    cmd += [f"seed={seed}", "trainer.progress_bar=false", "trainer.save_steps=0"]
    cmd += [f"hydra.run.dir={out}"]
    with open(out / "run.log", "w") as log:
        code = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return f"{arm} seed {seed}: exit {code}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", default="preset")
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], help="extra override for every run (KEY=VALUE)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args()
    if args.list:
        for name in ARMS:
            print(f"{name:24s} {' '.join(overrides(name))}")
        return 0
    unknown = [a for a in args.arms.split(",") if a not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}; --list shows them")
    retired = [f"{a}: {RETIRED[a]}" for a in args.arms.split(",") if a in RETIRED]
    if retired:
        p.error("; ".join(retired))
    todo = [(arm, s) for s in seeds(args.seeds) for arm in args.arms.split(",")]
    with ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(lambda job: run(*job, args.threads, args.set), todo):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
