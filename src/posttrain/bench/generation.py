"""Rollout-engine benchmark: tokens per second of each generation backend on GRPO's own rollout batch, and whether
each one's greedy tokens equal transformers' dynamic-cache `generate` on the same weights.

    python -m posttrain.bench generation [--experiment grpo_smollm2_add] [--set KEY=VALUE ...]
        [--backends hf,bf16_copy,static,static+compile] [--batch N] [--new-tokens N] [--repeats 3] [--check]

The config is composed as `train.py` composes it (`+experiment=<experiment>` and the `--set` overrides, the hw
profile applied; `--set hw=h200` on a GPU machine), one GRPO trainer is built (its policy, tokenizer and TRL's
`GenerationConfig`), and every backend's engine samples from that policy: `hf` from the policy itself, the
merged-copy backends (`posttrain.rollout`) from their copy. `static+compile` is `static` with the decode step
compiled also where the config leaves it off (on CPU; on CUDA `static` compiles already).

The prompts are the first `--batch` prompts of the experiment's training set; each backend generates
`--new-tokens` tokens (no early stop: EOS is suppressed so every row has the same length) once untimed (compilation,
allocator) and then `--repeats` times, sampled with the config's temperature/top-p/top-k; `tokens_per_s` is
batch x new tokens over the best repeat. Greedy: one more call with `do_sample=False`, compared token for token with
`generate` on the same model with a dynamic cache (`greedy_equal`) and, for copies, the fraction of tokens equal
to the policy's own greedy tokens (`agree_with_policy`: 1.0 only when the copy has the policy's dtype).

One JSON line per backend. Exit status 0; 1 with `--check` when a backend's greedy tokens differ from its
reference, or a backend failed; 2 on usage errors.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_BACKENDS = {"cpu": "hf,bf16_copy,static", "cuda": "hf,static"}


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m posttrain.bench generation", description=__doc__.split("\n")[0])
    p.add_argument("--experiment", default="grpo_smollm2_add", help="conf/experiment preset ('' for none)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--backends", help="comma-separated; default: hf,bf16_copy,static on CPU, hf,static on CUDA")
    p.add_argument("--batch", type=int, help="sequences per call (default: trainer.per_device_batch_size)")
    p.add_argument("--new-tokens", type=int, help="tokens per sequence (default: algo.trl.max_completion_length)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", action="store_true", help="exit 1 unless every backend's greedy tokens are equal")
    return p.parse_args(argv)


def _config(args: argparse.Namespace):
    from posttrain.config.compose import load_config
    from posttrain.hardware import apply_profile
    from posttrain.hardware.profile import override_keys

    overrides = ([f"+experiment={args.experiment}"] if args.experiment else []) + list(args.set)
    cfg = load_config([*overrides, "trainer.progress_bar=false", "algo.heldout=0"])
    apply_profile(cfg, overrides=override_keys(overrides))
    return cfg


def _prompts(trainer: Any, n: int) -> list[list[int]]:
    rows = [trainer.train_dataset[i % len(trainer.train_dataset)] for i in range(n)]
    return trainer._tokenize_prompts([row["prompt"] for row in rows])[0]


def _engine(name: str, cfg: Any, trainer: Any, generation_config: Any):
    from omegaconf import open_dict

    from posttrain.rollout import build_engine
    from posttrain.rollout.engine import RolloutEngine

    policy = trainer.accelerator.unwrap_model(trainer.model)
    common = {"pad_token_id": trainer.processing_class.pad_token_id, "eos_token_ids": trainer.eos_token_ids}
    if name == "hf":
        return RolloutEngine(policy, generation_config, name="hf", **common)
    backend, _, option = name.partition("+")
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.algo.generation.backend = backend
        if option == "compile":
            cfg.algo.generation.compile = True
    engine = build_engine(cfg, policy, generation_config, **common)
    engine.name = name
    return engine


def _time(engine: Any, prompts: list[list[int]], repeats: int) -> dict[str, Any]:
    import torch

    def call() -> float:
        start = time.perf_counter()
        out = engine.generate(prompts)  # .tolist() inside: the device has finished
        assert all(len(c) == len(out[0]) for c in out)
        return time.perf_counter() - start

    first = call()
    times = [call() for _ in range(repeats)]
    tokens = len(prompts) * engine.generation_config.max_new_tokens
    record = {"first_call_s": round(first, 4), "seconds": [round(t, 4) for t in times]}
    record["tokens_per_s"] = round(tokens / min(times), 1)
    if torch.cuda.is_available():
        record["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return record


def _greedy(engine: Any, prompts: list[list[int]]) -> list[list[int]]:
    saved = engine.generation_config
    engine.generation_config = copy.deepcopy(saved)
    engine.generation_config.update(do_sample=False, temperature=1.0, top_p=1.0, top_k=50)  # sampling knobs unset
    try:
        return engine.generate(prompts)
    finally:
        engine.generation_config = saved


def _reference(engine: Any, generation_config: Any, prompts: list[list[int]]) -> list[list[int]]:
    """Greedy tokens of transformers' dynamic-cache `generate` on the model `engine` samples from."""
    from posttrain.rollout.engine import RolloutEngine

    ref = RolloutEngine(
        engine.model, generation_config, pad_token_id=engine.pad_token_id, eos_token_ids=engine.eos_token_ids
    )
    return _greedy(ref, prompts)


def _agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
    return round(sum(x == y for x, y in pairs) / max(len(pairs), 1), 4)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch
    from transformers import set_seed

    from posttrain.algos.registry import get_algorithm

    cfg = _config(args)
    set_seed(cfg.seed)
    run_dir = Path(tempfile.mkdtemp(prefix="bench_generation_"))
    trainer: Any = get_algorithm(cfg.algo.name).build_trainer(cfg, run_dir, [])
    batch = args.batch or cfg.trainer.per_device_batch_size
    new_tokens = args.new_tokens or cfg.algo.trl.max_completion_length
    prompts = _prompts(trainer, batch)
    generation_config = copy.deepcopy(trainer.generation_config)
    generation_config.max_new_tokens = generation_config.min_new_tokens = new_tokens  # no early EOS: fixed lengths
    device = cfg.hw.device
    names = (args.backends or DEFAULT_BACKENDS.get(device, "hf")).split(",")
    policy_greedy: list[list[int]] | None = None
    records = []
    for name in names:
        record: dict[str, Any] = {"bench": "generation", "backend": name, "device": device, "batch": batch}
        record.update(new_tokens=new_tokens, model=cfg.model.name, precision=cfg.hw.precision)
        try:
            engine = _engine(name, cfg, trainer, generation_config)
            record["dtype"] = str(next(engine.model.parameters()).dtype).removeprefix("torch.")
            torch.manual_seed(cfg.seed)
            record.update(_time(engine, prompts, args.repeats))
            greedy = _greedy(engine, prompts)
            record["greedy_equal"] = greedy == _reference(engine, generation_config, prompts)
            if name == "hf":
                policy_greedy = greedy
            elif policy_greedy is not None:
                record["agree_with_policy"] = _agreement(greedy, policy_greedy)
        except Exception as ex:  # one backend failing does not hide the others' numbers
            record["error"] = f"{type(ex).__name__}: {ex}"
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    records = run(args)
    if any("error" in r for r in records):
        return 1
    if args.check and not all(r.get("greedy_equal") for r in records):
        return 1
    return 0
