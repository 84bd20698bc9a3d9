"""Bad-input cases for `python train.py`: each must fail with one `error:` line, exit non-zero, overwrite nothing.

    python experiments/reliability/cases.py --jobs 2          # every case as a real subprocess; rewrites the tables
    python experiments/reliability/cases.py --only nan_loss   # re-run one case, replace its row

Each run merges its cases into results/cases.csv (one row per case) and report.py rewrites results/report.md.

A case is a command line (overrides; `{case}` is the case's own folder) plus an optional setup that writes the bad
file or the run dir already on disk. reliability_runner.py snapshots the case folder and the shared reference checkpoint
before the case and checks afterwards that no file was changed or removed. `tests/reliability/test_bad_inputs.py`
runs the same cases in-process (one interpreter, fast) and a few of them as subprocesses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reliability_runner import (
    CONTRASTIVE,
    D2L,
    FAST,
    HERE,
    ROOT,
    Case,
    Result,
    make_good_checkpoint,
    run_case,
    run_cli_inprocess,
)

__all__ = ["CASES", "FAST", "Case", "Result", "make_good_checkpoint", "run_case", "run_cli_inprocess"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _prompts(n: int = 8) -> str:
    return "".join(json.dumps({"prompt": [{"role": "user", "content": f"count to {i}"}]}) + "\n" for i in range(n))


def _malformed(case: Path) -> None:
    rows = _prompts(4).splitlines()
    rows[2] = '{"prompt": "unterminated'
    _write(case / "data.jsonl", "\n".join(rows) + "\n")


def _no_gen_tags(case: Path) -> None:
    template = (ROOT / "chat_templates" / "llama3.jinja").read_text()
    stripped = re.sub(r"{%-?\s*(end)?generation\s*-?%}", "", template)
    assert stripped != template
    _write(case / "no_tags.jinja", stripped)


def _copy_good(case: Path, name: str = "ckpt") -> Path:
    good = Path(os.environ["RELIABILITY_GOOD_CKPT"])
    dst = case / name / "checkpoints" / good.name
    shutil.copytree(good, dst)
    shutil.copyfile(good.parent.parent / "run_identity.json", case / name / "run_identity.json")
    return dst


def _truncated(case: Path) -> None:
    ckpt = _copy_good(case)
    f = ckpt / "adapter_model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _incomplete(case: Path) -> None:
    (_copy_good(case) / "COMPLETE").unlink()


def _truncated_optimizer(case: Path) -> None:
    f = _copy_good(case) / "optimizer.pt"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])


def _previous_run(case: Path, identity: dict, with_ckpt: bool = False) -> None:
    run = case / "run"
    _write(run / "run_identity.json", json.dumps(identity, indent=2))
    _write(run / "config.yaml", "# the previous run's config\n")
    _write(run / ".hydra" / "config.yaml", "# the previous run's hydra config\n")
    _write(run / "metrics.jsonl", json.dumps({"step": 1, "loss": 0.5}) + "\n")
    if with_ckpt:
        shutil.copytree(Path(os.environ["RELIABILITY_GOOD_CKPT"]), run / "checkpoints" / "checkpoint-1")


def _damaged_run(case: Path) -> None:
    _previous_run(case, GRPO_ID, with_ckpt=True)
    f = case / "run" / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:-64])


def _not_utf8(case: Path) -> None:
    rows = _prompts(4).encode().splitlines()
    rows[1] = '{"prompt": "caf\u00e9 au lait"}'.encode("latin-1")  # a Latin-1 export, not UTF-8
    (case / "data.jsonl").write_bytes(b"\n".join(rows) + b"\n")


def _rows(case: Path, *rows: object) -> None:
    _write(case / "data.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


GRPO_ID = {"model": "tiny_llama", "algo": "grpo", "data": "length"}
CONTRASTIVE_ID = {"model": "tiny_llama", "algo": "contrastive", "data": "contrastive_injection"}

CASES: list[Case] = [
    # -- config: composition ------------------------------------------------------------------------------------
    Case(
        "unknown_group_choice",
        "unknown config group choice",
        ("model=tiny_lama",),
        r"Could not find 'model/tiny_lama'.*available:.*tiny_llama",
    ),
    Case("unknown_algo", "unknown algorithm", ("algo=ppo",), r"Could not find 'algo/ppo'"),
    Case("unknown_key", "misspelt key", ("trainer.lrr=1e-3",), r"trainer\.lrr: Key 'lrr' not in 'TrainerConfig'"),
    Case(
        "wrong_type_int",
        "wrong type (text for an int)",
        ("trainer.max_steps=ten",),
        r"trainer\.max_steps: Value 'ten' .*could not be converted to Integer",
    ),
    Case(
        "wrong_type_bool",
        "wrong type (text for a bool)",
        ("trainer.progress_bar=maybe",),
        r"progress_bar.*maybe.*[Bb]ool",
    ),
    # -- config: values and cross-field rules -------------------------------------------------------------------
    Case("negative_lr", "negative learning rate", ("trainer.lr=-1e-4",), r"trainer\.lr=-0\.0001 must be > 0"),
    Case("zero_steps", "max_steps = 0", ("trainer.max_steps=0",), r"trainer\.max_steps=0 must be > 0"),
    Case(
        "bad_scheduler",
        "unknown LR scheduler",
        ("trainer.lr_scheduler=cosine_wobble",),
        r"trainer\.lr_scheduler='cosine_wobble' is not one of",
    ),
    Case(
        "bad_optimizer",
        "unknown optimizer",
        ("hw.optimizer=adamw_wobble",),
        r"hw\.optimizer='adamw_wobble' is not one of",
    ),
    Case(
        "num_generations_divide",
        "num_generations not dividing the batch",
        ("algo.trl.num_generations=3",),
        r"algo\.trl\.num_generations=3 must divide the generation batch",
    ),
    Case(
        "num_generations_one",
        "one generation per prompt (no group)",
        ("algo.trl.num_generations=1",),
        r"num_generations=1 must be >= 2",
    ),
    Case(
        "bad_loss_type",
        "unknown GRPO loss type",
        ("algo.trl.loss_type=ppo",),
        r"algo\.trl\.loss_type='ppo' is not one of",
    ),
    Case(
        "kernel_cannot_feed_the_loss",
        "kernel without the entropy gradient the loss needs",
        # without kernels=fused, hw=cpu's GRPO default gives way to trl
        ("kernels=fused", "algo.trl.entropy_coef=0.01"),
        r"kernels=fused: the entropy bonus \(entropy_coef\) needs an entropy gradient",
    ),
    Case(
        "d2l_rank_queries",
        "per_rank_gen / aggregator queries mismatch (d2l)",
        ("algo.per_rank_gen=false", "algo.aggregator.num_queries=64"),
        r"per_rank_gen=False needs",
        base=D2L,
    ),
    Case(
        "d2l_layer_depth",
        "per_layer_processing reads past the encoder (d2l)",
        ("algo.per_layer_processing=true", "algo.encoder.early_exit_layer=1"),
        r"per_layer_processing=true reads layer 1.*early_exit_layer=1",
        base=D2L,
    ),
    Case(
        "lr_inf",
        "infinite learning rate",
        ("trainer.lr=inf",),
        r"trainer\.lr=inf must be a finite number",
        writes_nothing=True,
    ),
    Case(
        "beta_nan",
        "NaN KL coefficient",
        ("algo.trl.beta=nan",),
        r"algo\.trl\.beta=nan must be a finite number",
        writes_nothing=True,
    ),
    Case(
        "mxfp4_bnb",
        "MXFP4 GPT-OSS + bitsandbytes",
        ("model=gpt_oss", "model.quantization=bnb4"),
        r"bnb4 on GPT-OSS.*never combined with a bitsandbytes",
    ),
    Case("mxfp4_llama", "MXFP4 on a non-GPT-OSS model", ("model.quantization=mxfp4",), r"mxfp4 is only for GPT-OSS"),
    Case(
        "does_not_fit",
        "model that cannot fit the device (memory plan)",
        ("model=llama3_1_8b", "hw.device_gib=4"),
        r"fit|GiB",
    ),
    # -- data ------------------------------------------------------------------------------------------------------
    Case(
        "missing_dataset",
        "missing dataset file",
        ("data.source=jsonl", "data.path={case}/nope.jsonl"),
        r"dataset file not found: .*nope\.jsonl",
        writes_nothing=True,
    ),
    Case(
        "malformed_jsonl",
        "malformed JSONL line",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"data\.jsonl:3:\d+: malformed JSON \(Unterminated string\)",
        setup=_malformed,
        writes_nothing=True,
    ),
    Case(
        "jsonl_missing_key",
        "JSONL row without a prompt",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"data\.jsonl:1: missing key\(s\) prompt",
        setup=lambda c: _write(c / "data.jsonl", json.dumps({"question": "hi"}) + "\n"),
    ),
    Case(
        "empty_dataset",
        "empty dataset file",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"dataset file is empty",
        setup=lambda c: _write(c / "data.jsonl", "\n"),
        writes_nothing=True,
    ),
    Case(
        "not_utf8",
        "data file that is not UTF-8 text",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"data\.jsonl:2:\d+: not UTF-8 text \(byte 0xe9\)",
        setup=_not_utf8,
        writes_nothing=True,
    ),
    Case(
        "prompt_not_string",
        "JSONL prompt that is neither text nor chat messages",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"data\.jsonl:2: prompt must be a string or a list of chat messages .*got a number",
        setup=lambda c: _rows(c, {"prompt": "count to 3"}, {"prompt": 3}),
        writes_nothing=True,
    ),
    Case(
        "empty_prompt",
        "empty prompt string",
        ("data.source=jsonl", "data.path={case}/data.jsonl"),
        r"data\.jsonl:2: prompt is empty",
        setup=lambda c: _rows(c, {"prompt": "count to 3"}, {"prompt": "  "}),
        writes_nothing=True,
    ),
    Case("empty_generator", "data set with zero rows", ("data.num_train=0",), r"is empty"),
    Case("unknown_generator", "unknown data generator", ("data.name=nope",), r"data\.name='nope' has no generator"),
    Case(
        "prompt_too_long",
        "prompts longer than the context",
        ("algo.max_prompt_length=8",),
        r"prompt 0 is \d+ tokens, longer than algo\.max_prompt_length=8",
    ),
    Case(
        "no_generation_tags",
        "chat template without {% generation %} tags (all labels masked)",
        ("model.chat_template={case}/no_tags.jinja",),
        r"no \{% generation %\} tags.*every label would be masked",
        setup=_no_gen_tags,
        base=CONTRASTIVE,
    ),
    Case(
        "missing_chat_template",
        "chat template file that does not exist",
        ("model.chat_template=nope.jinja",),
        r"model\.chat_template=nope\.jinja: no such chat template \(.*chat_templates/nope\.jinja\)",
    ),
    Case(
        "vocab_mismatch",
        "tokenizer larger than the model's vocabulary",
        ("model.arch.vocab_size=100",),
        r"tokenizer has \d+ tokens but model\.arch\.vocab_size=100",
    ),
    # -- checkpoints and run dirs -----------------------------------------------------------------------------
    Case(
        "resume_missing",
        "resume=path that does not exist",
        ("resume={case}/nowhere",),
        r"resume=.*nowhere: no such checkpoint directory",
    ),
    Case(
        "resume_incomplete",
        "resume=path of an unfinished checkpoint",
        ("resume={case}/ckpt/checkpoints/checkpoint-1",),
        r"incomplete checkpoint \(no COMPLETE\)",
        setup=_incomplete,
    ),
    Case(
        "truncated_safetensors",
        "truncated safetensors checkpoint",
        ("resume={case}/ckpt/checkpoints/checkpoint-1",),
        r"damaged checkpoint file .*adapter_model\.safetensors",
        setup=_truncated,
    ),
    Case(
        "truncated_optimizer",
        "truncated optimizer state",
        ("resume={case}/ckpt/checkpoints/checkpoint-1",),
        r"damaged checkpoint file .*optimizer\.pt",
        setup=_truncated_optimizer,
    ),
    Case(
        "resume_auto_damaged",
        "resume=auto whose newest checkpoint is truncated (no silent fallback)",
        ("resume=auto",),
        r"damaged checkpoint file .*run/checkpoints/checkpoint-1/adapter_model\.safetensors",
        setup=_damaged_run,
    ),
    Case(
        "other_model_ckpt",
        "checkpoint from another model",
        ("model=tiny_gpt_oss", "resume={case}/ckpt/checkpoints/checkpoint-1"),
        r"written by a run with model=tiny_llama.*model=tiny_gpt_oss",
        setup=_copy_good,
    ),
    Case(
        "different_run_dir",
        "run dir that already holds a different run",
        (),
        r"already holds a different run \(differs in algo, data\)",
        setup=lambda c: _previous_run(c, CONTRASTIVE_ID),
    ),
    Case(
        "run_dir_has_ckpts",
        "run dir with checkpoints, no resume=auto",
        (),
        r"already holds checkpoints: pass resume=auto",
        setup=lambda c: _previous_run(c, GRPO_ID, with_ckpt=True),
    ),
    Case(
        "run_dir_has_metrics",
        "run dir of a run killed before its first checkpoint, no resume=auto",
        (),
        r"already holds a run's metrics\.jsonl: pass resume=auto",
        setup=lambda c: _previous_run(c, GRPO_ID),
    ),
    Case(
        "run_dir_not_creatable",
        "run dir that cannot be created (a file is in the way)",
        (),
        r"hydra\.run\.dir=.*/run: cannot create the run directory \(.*/run is a file\)",
        setup=lambda c: _write(c / "run", "not a directory\n"),
        writes_nothing=True,
    ),
    Case(
        "damaged_identity",
        "run dir whose run_identity.json is damaged",
        (),
        r"run_identity\.json is damaged",
        setup=lambda c: _write(c / "run" / "run_identity.json", "{not json"),
    ),
    # -- training guards ------------------------------------------------------------------------------------------
    Case(
        "nan_loss",
        "NaN loss (lr=1e30, contrastive)",
        ("trainer.lr=1e30", "trainer.max_steps=3"),
        r"non-finite loss \(.*\) at step 2",
        base=CONTRASTIVE,
    ),
    Case(
        "grpo_diverged",
        "diverged GRPO policy (lr=1e30): NaN logits while sampling",
        ("trainer.lr=1e30",),
        r"non-finite (logits|weights).* at step 2",
    ),
    Case(
        "reward_raises",
        "reward function raising",
        ("algo.rewards=[{name: test_raising}]",),
        r"reward 'test_raising' raised ValueError: cannot parse completion",
        plugin=True,
    ),
    Case(
        "reward_wrong_length",
        "reward returning the wrong number of values",
        ("algo.rewards=[{name: test_short}]",),
        r"reward 'test_short' returned 3 values for 4 completions",
        plugin=True,
    ),
    Case("unknown_reward", "unknown reward name", ("algo.rewards=[{name: nope}]",), r"unknown reward 'nope'"),
    Case(
        "reward_bad_kwarg",
        "reward option it does not take",
        ("algo.rewards=[{name: length_to_cap, kwargs: {cop: 3}}]",),
        r"unknown kwargs \['cop'\]",
    ),
    Case(
        "plus_key_typo",
        "misspelt key added with + (issue 60)",
        ("+trainer.max_step=3",),
        r"trainer has no key 'max_step' \(did you mean trainer\.max_steps\?\)",
        before="silently accepted",
    ),
    Case(
        "arch_negative",
        "negative hidden size (issue 60)",
        ("model.arch.hidden_size=-64",),
        r"model\.arch\.hidden_size=-64 must be > 0",
        before="traceback",
    ),
    Case(
        "arch_typo",
        "misspelt architecture key (issue 60)",
        ("+model.arch.hiden_size=64",),
        r"model\.arch\.hiden_size: LlamaConfig has no such field \(did you mean model\.arch\.hidden_size\?\)",
    ),
    Case(
        "attention_unknown",
        "unknown attention implementation (issue 60)",
        ("model.attn_implementation=bogus",),
        r"model\.attn_implementation='bogus' is not one of eager, ",
        before="traceback",
    ),
    Case(
        "attention_flash_on_cpu",
        "FlashAttention on a CPU, not installed (issue 60)",
        ("model.attn_implementation=flash_attention_2",),
        r"model\.attn_implementation=flash_attention_2 runs on CUDA only, not hw\.device=cpu",
        before="traceback",
    ),
    Case(
        "lora_target_unknown",
        "LoRA target that names no module (issue 60)",
        ("model.lora.target_modules=[foo_proj]",),
        r"'foo_proj' names no module of this llama model; its linear layers: down_proj, gate_proj",
        before="traceback",
    ),
    Case(
        "chat_template_syntax",
        "chat template with a Jinja syntax error (issue 60)",
        ("model.chat_template={case}/bad.jinja",),
        r"model\.chat_template=.*bad\.jinja: line 2: unexpected '\}'",
        setup=lambda c: _write(c / "bad.jinja", "{% for m in messages %}\n{{ m['content'] }\n{% endfor %}"),
        before="traceback",
    ),
    Case(
        "model_path_on_a_tiny_model",
        "model directory given to a tiny random model (issue 60)",
        ("model.path={case}",),
        r"model\.path is ignored by model=tiny_llama \(model\.tiny=true builds a random model\)",
        before="silently accepted",
    ),
    Case(
        "model_config_corrupt",
        "model directory with a corrupt config.json (issue 60)",
        ("model=smollm2_135m", "model.path={case}"),
        r"model\.path=.*: config\.json does not parse \(Expecting property name",
        setup=lambda c: _write(c / "config.json", "{bad"),
        before="traceback",
    ),
    Case(
        "model_without_tokenizer",
        "model directory without a tokenizer (issue 60)",
        ("model=smollm2_135m", "model.path={case}"),
        r"model\.path=.*: no tokenizer \(tokenizer\.json, tokenizer\.model, vocab\.json, tokenizer_config\.json",
        setup=lambda c: _write(c / "config.json", "{}"),
        before="traceback",
    ),
    Case(
        "old_trl_key",
        "GRPOConfig field under its pre-algo.trl name (issue 59)",
        ("algo.beta=0",),
        r"algo\.beta: Key 'beta' not in 'GRPOAlgoConfig' \(did you mean algo\.trl\.beta\?\)",
    ),
    Case(
        "grpo_config_refuses",
        "values GRPOConfig's own checks refuse (issue 59)",
        ("algo.trl.vllm_importance_sampling_clip_min=3", "algo.trl.vllm_importance_sampling_clip_max=2"),
        r"algo\.trl: TRL's GRPOConfig refuses these values: vllm_importance_sampling_clip_min \(3\.0\) must be less",
    ),
    Case(
        "task_of_another_algorithm",
        "GRPO task under D2L (issue 59)",
        ("algo=d2l", "data=add"),
        r"data=add sets algo\.heldout, which algo=d2l does not have: .* \(algo=d2l trains on e\.g\. data=d2l_synth\)",
        base=("trainer.max_steps=1", "trainer.progress_bar=false"),
    ),
    Case(
        "data_path_without_source",
        "data file given without data.source=jsonl (issue 60)",
        ("data.path={case}/data.jsonl",),
        r"data\.path=.*data\.jsonl is not read with data\.source=generator .*add data\.source=jsonl",
        setup=lambda c: _write(c / "data.jsonl", _prompts()),
        writes_nothing=True,
        before="silently accepted",
    ),
]


# -- results/cases.csv and results/report.md -----------------------------------------------------------------------
RESULTS = HERE / "results" / "cases.csv"


def _report():
    """report.py beside this file, by its path (it renders results/report.md from results/cases.csv)."""
    spec = importlib.util.spec_from_file_location("reliability_report", HERE / "report.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _display_args(case: Case) -> str:
    args = " ".join(a.replace("{case}", "<case>") for a in case.args) or "(run dir prepared)"
    if case.base is D2L:
        args = "algo=d2l data=d2l_synth " + args
    elif case.base is CONTRASTIVE:
        args = "algo=contrastive (tiny) " + args
    return args


def record(r: Result, work: Path) -> dict:
    """What the tables show of one subprocess result (work-dir paths written as <work>)."""
    lines = [ln.replace(str(work), "<work>") for ln in r.lines]
    return {
        "id": r.case.id,
        "problem": r.case.problem,
        "args": _display_args(r.case),
        "exit": r.rc,
        "stderr": lines,
        "changed": r.changed,
        "created": r.created,
        "problems": r.problems(),
        "seconds": r.seconds,
        "mode": "subprocess",
        "writes_nothing": r.case.writes_nothing,
    }


def write_outputs(new: list[dict]) -> list[dict]:
    """Merge `new` into results/cases.csv (case order, cases no longer listed dropped); rewrite results/report.md."""
    report = _report()
    old = {r["id"]: r for r in report.read_cases(RESULTS)}
    old.update({r["id"]: r for r in new})
    records = [old[c.id] for c in CASES if c.id in old]
    report.write_cases(RESULTS, records)
    report.report(RESULTS.parent, RESULTS.parent)
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="case ids (their rows of results/cases.csv are replaced)")
    ap.add_argument("--work", type=Path, help="work dir (default: a temp dir)")
    ap.add_argument("--inprocess", action="store_true", help="run in this interpreter (fast, less strict; no write)")
    ap.add_argument("--no-write", action="store_true", help="do not touch results/cases.csv and results/report.md")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (subprocess mode)")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    make_good_checkpoint(work, a.inprocess)
    cases = [c for c in CASES if not a.only or c.id in a.only]

    def one(case: Case) -> Result:
        r = run_case(case, work, a.inprocess)
        status = "ok" if not r.problems() else "FAIL " + "; ".join(r.problems())
        print(f"{case.id:24s} rc={r.rc} {r.seconds:5.1f}s {status}\n    {r.message}", flush=True)
        return r

    if a.jobs > 1 and not a.inprocess:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(one, cases))
    else:
        results = [one(c) for c in cases]
    if not a.no_write and not a.inprocess:
        write_outputs([record(r, work) for r in results])
    bad = [r.case.id for r in results if r.problems()]
    print(f"{len(results) - len(bad)}/{len(results)} cases hold the contract" + (f"; failing: {bad}" if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
