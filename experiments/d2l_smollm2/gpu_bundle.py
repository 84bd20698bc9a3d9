"""The CPU side of gpu_scale.py: a device call's d2l_scale bundle into report.py's layout, and the hypernets it
brought back evaluated on this machine (the conditions, documents and lengths the device had no time for).

    cat /work/.device/.../d2l_scale.tgz.* | tar xz -C /tmp        # -> /tmp/d2l_scale (real_weights.sh packs it)
    python experiments/d2l_smollm2/gpu_bundle.py unpack /tmp/d2l_scale experiments/d2l_smollm2/results/<set>
    python experiments/d2l_smollm2/gpu_bundle.py evaluate /tmp/d2l_scale experiments/d2l_smollm2/results/<set> \\
        --eval-tokens 0,1024,2048,4096 --eval-docs 48 --conditions d2l,d2l_other_doc,d2l_other_entity

`unpack` writes, for each run <arm>[_s<seed>] of the bundle, <results>/<arm>/s<seed>/{eval,summary}.json (the
evaluation at the end of training, on the device) and s<seed>_x<k>/eval.json (the long documents evaluated there, k
= tokens / the preset's 512-token window), and keeps the logs in <results>/raw. `evaluate` runs `train.py mode=eval`
of each <name>_hypernet in the bundle on this machine (hw=cpu, fp32: another precision than the device's bf16, so
its results go to their own set, <results>/<arm>_cpu/s<seed>[_x<k>]; 0 tokens: the documents that fit). Only the
conditions that read the hypernet belong there: the others do not depend on the seed and run once (`mode=eval
eval.checkpoint=init`), to be paired with every seed by `report.py --rows`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_scale import ARMS, COMMON, eval_overrides, merged, run  # noqa: E402  (a script beside this one)

WINDOW = 512  # algo.context_window of conf/experiment/d2l_smollm2.yaml: the long lengths are multiples of it
NAME = re.compile(r"(?P<arm>.+?)(?:_s(?P<seed>\d+))?")


def arm_and_seed(name: str) -> tuple[str, int]:
    """`fact1_chunks_s2` -> (fact1_chunks, 2); `fact1` -> (fact1, 0), as gpu_scale.py names its runs."""
    m = NAME.fullmatch(name)
    if not m or m["arm"] not in ARMS:
        raise ValueError(f"{name}: not a gpu_scale.py run (arms: {', '.join(ARMS)})")
    return m["arm"], int(m["seed"] or 0)


def set_name(seed: int, tokens: int) -> str:
    """report.py's folder for a seed's evaluation at `tokens` (0: the documents that fit)."""
    if tokens % WINDOW:
        raise ValueError(f"{tokens} tokens is not a multiple of the {WINDOW}-token window")
    return f"s{seed}" if not tokens else f"s{seed}_x{tokens // WINDOW}"


def unpack(bundle: Path, results: Path) -> list[Path]:
    """Each <name>.json of `bundle` into report.py's folders under `results`; the folders written."""
    written = []
    for path in sorted(bundle.glob("*.json")):
        arm, seed = arm_and_seed(path.stem)
        run_json = json.loads(path.read_text())
        sets = {0: run_json.get("eval") or {}, **{int(t): e for t, e in run_json.get("long", {}).items() if e}}
        for tokens, evaluation in sets.items():
            folder = results / arm / set_name(seed, tokens)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "eval.json").write_text(json.dumps(evaluation))
            if not tokens:
                (folder / "summary.json").write_text(json.dumps(run_json.get("summary") or {}))
            written.append(folder)
    raw = results / "raw"
    for log in bundle.glob("*.log"):
        raw.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, raw / log.name)
    return written


def evaluate(
    bundle: Path,
    results: Path,
    eval_tokens: list[int],
    eval_docs: int,
    conditions: list[str],
    device: list[str],
    threads: int = 2,
) -> list[Path]:
    """`mode=eval` of each hypernet of `bundle` at each of `eval_tokens` on the first `eval_docs` held-out documents;
    the folders written (results/<arm>_cpu/s<seed>[_x<k>])."""
    hypernets = sorted(bundle.glob("*_hypernet"))
    if not hypernets:
        raise FileNotFoundError(f"{bundle}: no <name>_hypernet folder (a bundle from before 2026-11-27 has none)")
    todo = [(h, t) for h in hypernets for t in eval_tokens]
    written = []
    for hypernet, tokens in tqdm(todo, desc="evaluating hypernets", unit="evaluation"):
        arm, seed = arm_and_seed(hypernet.name.removesuffix("_hypernet"))
        folder = results / f"{arm}_cpu" / set_name(seed, tokens)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        over = [
            f"seed={seed}",
            "trainer.progress_bar=false",
            *eval_overrides(hypernet.resolve(), tokens, eval_docs, conditions),
        ]
        cmd = [sys.executable, "train.py", *merged(COMMON, ARMS[arm], device, over), f"hydra.run.dir={folder}"]
        if run(cmd, folder / "train.log", threads):
            raise RuntimeError(f"{hypernet.name} at {tokens} tokens failed: {folder / 'train.log'}")
        written.append(folder)
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["unpack", "evaluate"])
    ap.add_argument("bundle", type=Path, help="the unpacked d2l_scale folder")
    ap.add_argument("results", type=Path, help="where report.py's folders go")
    ap.add_argument("--eval-tokens", default="0", help="evaluate: document lengths (0: the documents that fit)")
    ap.add_argument("--eval-docs", type=int, default=48, help="evaluate: held-out documents")
    ap.add_argument("--conditions", default="d2l,d2l_other_doc,d2l_other_entity", help="evaluate: algo.eval_conditions")
    ap.add_argument("--threads", type=int, default=2, help="evaluate: OMP_NUM_THREADS")
    ap.add_argument("--tiny", action="store_true", help="the small random-init model of gpu_scale.py --tiny")
    args = ap.parse_args(argv)
    if not args.bundle.is_dir():
        ap.error(f"{args.bundle}: no such folder")
    if args.what == "unpack":
        written = unpack(args.bundle, args.results)
    else:
        tokens = [int(t) for t in args.eval_tokens.split(",") if t]
        bad = [t for t in tokens if t % WINDOW]
        if bad:
            ap.error(f"--eval-tokens {bad[0]} is not a multiple of the {WINDOW}-token window")
        device = ["hw=cpu", "hw.precision=fp32"]
        if args.tiny:
            from gpu_scale import SMOKE

            device += SMOKE
        conditions = [c for c in args.conditions.split(",") if c]
        written = evaluate(args.bundle, args.results, tokens, args.eval_docs, conditions, device, args.threads)
    print("\n".join(str(w) for w in written))


if __name__ == "__main__":
    main()
