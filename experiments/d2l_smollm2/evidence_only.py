"""Does reading the other facts hold D2L back on several-fact documents? Each held-out question asked with the
hypernet reading the whole document, and again reading only the sentence that states its answer (its `reply`, a
one-fact document), paired question by question:

    python experiments/d2l_smollm2/evidence_only.py \\
        --config experiments/d2l_smollm2/results/gpu_2026-11-28_h200/facts3_sentences_cpu/s0/config.yaml \\
        --whole experiments/d2l_smollm2/results/gpu_2026-11-28_h200/facts3_sentences_cpu \\
        --hypernets .gpu/2026-11-28_facts3_sentences_hypernet,.gpu/2026-11-28_facts3_sentences_s1_hypernet,... \\
        --out experiments/d2l_smollm2/results/probes/evidence_only/facts3_sentences_h200

`--config`: a run's config.yaml, which fixes the data, model and reading (`--set key=value ...` overrides it; the
raw run folders of the example are not in git since 2026-12-01: any run's config.yaml on the same data);
`--hypernets`: one per seed, in seed order. `--whole`: earlier `mode=eval` runs of the same questions,
s<seed>/eval.json (without it the whole documents are evaluated here, <out>/s<seed>_whole/). Writes
<out>/s<seed>/eval.json (the one-sentence documents: D2L, the other document's LoRA, and in context for the first
seed) and <out>/report.md: accuracy and answer CE of both readings per seed and pooled, their paired difference
(95% CI resampling the original documents), by kind of answer. A hypernet whose sentence LoRAs each carry their
fact but disturb one another scores far higher on the sentence alone; one that cannot write a fact into its LoRA
scores as low there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from report import cell, command_line, pooled  # noqa: E402  (a script beside this one)

WHOLE, SENTENCE = "d2l", "d2l_sentence"  # the per-question keys of the two readings in the paired rows


def sentence_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` with each question's document replaced by its reply sentence (the one that states its answer);
    character offsets into the old document dropped."""
    out = []
    for r in records:
        reply = r.get("reply") or ""
        if r.get("hops", 1) != 1 or r["answer"] not in reply:
            raise ValueError(f"needs one-fact questions whose reply sentence states the answer, not {r['question']!r}")
        out.append({k: v for k, v in r.items() if k not in ("answer_start", "evidence_end")} | {"document": reply})
    return out


def evaluate_seed(cfg: DictConfig, hypernet: Path, conditions: list[str], sentences: bool) -> dict[str, Any]:
    """`mode=eval` of `hypernet` on `cfg`'s held-out questions, their documents (`sentences`) cut to the answer's
    sentence."""
    from posttrain.algos.d2l.api import load_d2l
    from posttrain.algos.d2l.config import context_window
    from posttrain.algos.d2l.evaluate import evaluate_model
    from posttrain.data.d2l import d2l_records

    model = load_d2l(cfg, hypernet)
    held_out = d2l_records(cfg.data, model.tokenizer)[1]
    algo = cfg.algo
    return evaluate_model(
        model, sentence_records(held_out) if sentences else held_out, algo.max_length, algo.max_new_tokens,
        algo.eval_batch_size, context_window=context_window(cfg), conditions=conditions, seed=int(cfg.seed),
    )  # fmt: skip


def evaluated(folder: Path, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """folder/eval.json, written by `make()` first where it is missing (a rerun resumes)."""
    if not (folder / "eval.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "eval.json").write_text(json.dumps(make(), indent=2))
    return json.loads((folder / "eval.json").read_text())


def paired_runs(whole: dict[int, dict[str, Any]], sentence: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """report.py's runs for each seed: the whole document's rows (documents, kinds) with the sentence's D2L entry
    beside its own, checked to be the same questions."""
    runs = {}
    for seed, full in whole.items():
        rows = full["per_question"]
        mine = sentence[seed]["per_question"]
        if [r["question"] for r in rows] != [r["question"] for r in mine]:
            raise ValueError(f"seed {seed}: the sentence run asked other questions than the whole-document run")
        runs[seed] = {"eval": {"per_question": [r | {SENTENCE: m[WHOLE]} for r, m in zip(rows, mine, strict=True)]}}
    return runs


def table(runs: dict[int, dict[str, Any]]) -> list[str]:
    """The paired table: every question, then each kind of answer."""
    kinds = sorted({r["kind"] for r in runs[min(runs)]["eval"]["per_question"]})
    lines = [
        "| questions | D2L reads the whole document | D2L reads the answer's sentence alone "
        "| sentence - whole (paired) | answer CE, whole | answer CE, sentence |",
        "|---|---|---|---|---|---|",
    ]
    for kind in [None, *kinds]:
        sub = {
            s: {"eval": {"per_question": [r for r in run["eval"]["per_question"] if kind in (None, r["kind"])]}}
            for s, run in runs.items()
        }
        rows = sub[min(sub)]["eval"]["per_question"]
        docs = len({r["doc"] for r in rows})
        label = f"all ({len(rows)} in {docs} documents)" if kind is None else f"{kind} ({len(rows)})"
        lines.append(
            f"| {label} | {cell(pooled(sub, WHOLE, 'correct'))} | {cell(pooled(sub, SENTENCE, 'correct'))} "
            f"| {cell(pooled(sub, SENTENCE, 'correct', minus=WHOLE), signed=True)} "
            f"| {cell(pooled(sub, WHOLE, 'nll'))} | {cell(pooled(sub, SENTENCE, 'nll'))} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="a run's config.yaml: data, model, reading")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides of --config")
    p.add_argument("--hypernets", required=True, help="comma-separated hypernet folders, in seed order")
    p.add_argument("--whole", type=Path, help="s<seed>/eval.json of the whole documents (else evaluated here)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = OmegaConf.merge(OmegaConf.load(args.config), OmegaConf.from_dotlist(args.set))
    assert isinstance(base, DictConfig)
    whole, sentence = {}, {}
    for seed, hypernet in enumerate(Path(h) for h in args.hypernets.split(",")):
        cfg = OmegaConf.merge(base, {"seed": seed})
        assert isinstance(cfg, DictConfig)
        if args.whole:
            whole[seed] = json.loads((args.whole / f"s{seed}" / "eval.json").read_text())
        else:
            whole[seed] = evaluated(
                args.out / f"s{seed}_whole", partial(evaluate_seed, cfg, hypernet, ["d2l", "d2l_other_doc"], False)
            )
        conditions = ["d2l", "d2l_other_doc"] + (["in_context"] if seed == 0 else [])
        sentence[seed] = evaluated(args.out / f"s{seed}", partial(evaluate_seed, cfg, hypernet, conditions, True))
    seeds = sorted(sentence)
    first = sentence[seeds[0]]
    text = [
        command_line(sys.argv[1:] if argv is None else argv, None, "experiments/d2l_smollm2/evidence_only.py").rstrip(),
        "",
        f"### D2L on {first['num_questions']} held-out questions: the whole document, or the answer's sentence alone "
        f"(seeds {', '.join(map(str, seeds))})",
        "",
        *table(paired_runs(whole, sentence)),
        "",
        "One sentence, seed {}: in context {:.3f}, the other sentence's LoRA {:.3f}.".format(
            seeds[0], first["in_context"]["accuracy"], first["d2l_other_doc"]["accuracy"]
        ),
    ]
    (args.out / "report.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
