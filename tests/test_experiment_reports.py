"""Experiments' results as data (issue 58): each report.py regenerates its committed results/report.md from the
committed CSV tables alone (what a fresh clone has), its `--collect` step builds those tables from raw run output
(here a tiny synthetic one), and every decimal figure of an experiment's README is in its report.md.
(experiments/contrastive_smollm2's own tests are in tests/algos/contrastive/test_experiment.py.)"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import experiment_script

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
TYPED = ("kernels", "memory_plan", "reliability", "contrastive_tiny", "d2l_tiny")  # README tables moved to CSVs
REPORTED = ("contrastive_smollm2", "grpo_smollm2", "grpo_step", "grpo_arith", "gpu", "scale_out", *TYPED)
RAW_SAMPLE = {  # raw output
    "grpo_arith": "metrics_math.jsonl",
    "grpo_step": "results/maketrain_default_seed0.jsonl",
    "kernels": "results/1024x1024x131072_all_backends.jsonl",
    "memory_plan": "results/validate.txt",
    "reliability": "results.json",
    "contrastive_tiny": "results/contrastive/summary.json",
    "d2l_tiny": "results/A_init0.02_1500steps_eval.json",
}
FIGURELESS = {"reliability"}  # its result is a count of cases: no decimal figure to check


def _report(name: str):
    return experiment_script(EXPERIMENTS / name / "report.py")


@pytest.mark.parametrize("name", ["grpo_smollm2", "grpo_step", "grpo_arith", "gpu", "scale_out", *TYPED])
def test_report_regenerates_the_committed_report_from_the_committed_tables(name, tmp_path):
    _report(name).main(["--out", str(tmp_path)])
    assert (tmp_path / "report.md").read_bytes() == (EXPERIMENTS / name / "results" / "report.md").read_bytes()
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", (tmp_path / "report.md").read_text()))
    assert {p.name for p in tmp_path.glob("*.png")} == linked and len(linked) <= 3


def _prose(markdown: str) -> str:
    """The text of a README without its command lines (indented blocks, `code`): the overrides' values are no
    figures."""
    text = "\n".join(line for line in markdown.splitlines() if not line.startswith("    "))
    return re.sub(r"`[^`]*`", "", text)


# an estimate with its interval, "0.785 [0.646, 0.896]" or "+0.163 (+0.113, +0.213)": quoted whole or not at all
INTERVAL = re.compile(r"[+-]?\d+\.\d+ [\[(][+-]?\d+\.\d+, [+-]?\d+\.\d+[\])]")
REPORT_FOLDERS = {"grpo_objectives": ("results", "test_results")}  # issue 62's test split has a report of its own


@pytest.mark.parametrize("name", [*REPORTED, "grpo_objectives"])
def test_every_decimal_figure_of_the_readme_is_in_the_report(name):
    """Every decimal of the README's prose is in its report.md, and every interval there as a whole (a figure
    restated elsewhere with an old interval fails even where each of its numbers happens to stand somewhere)."""
    readme = _prose((EXPERIMENTS / name / "README.md").read_text())
    reports = [(EXPERIMENTS / name / f / "report.md").read_text() for f in REPORT_FOLDERS.get(name, ("results",))]
    figures = set(re.findall(r"(?<![\w.])[+-]?\d+\.\d+(?![\w.])", readme))
    assert (figures or name in FIGURELESS) and not sorted(f for f in figures if not any(f in r for r in reports))
    assert not sorted(i for i in set(INTERVAL.findall(readme)) if not any(i in r for r in reports))
    assert all(r.startswith(f"<!-- python experiments/{name}/report.py") for r in reports)
    assert len((EXPERIMENTS / name / "README.md").read_bytes()) <= 10_500


def test_every_experiments_tables_stay_small():
    """Every committed table of every experiment (those with their own tests too) under 300 kB: per-item tables
    repeat nothing constant per item (experiments/grpo_objectives keeps each problem's operation in problems.csv)."""
    tables = sorted(EXPERIMENTS.glob("*/results/*.csv"))
    assert len({p.parts[-3] for p in tables}) >= len(REPORTED)
    assert not [str(p.relative_to(ROOT)) for p in tables if p.stat().st_size >= 300_000]


@pytest.mark.parametrize("name", REPORTED)
def test_the_tables_stay_small_and_the_raw_output_out_of_git(name):
    """Each CSV under 300 kB; the folder's .gitignore keeps raw run output out of git but not what report.py reads
    and writes."""
    folder = EXPERIMENTS / name
    tables = sorted((folder / "results").glob("*.csv"))
    assert tables and all(p.stat().st_size < 300_000 for p in tables)
    report = (folder / "results" / "report.md").read_text()
    pngs = [folder / "results" / png for png in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)]
    kept = [*tables, *pngs, folder / "results" / "report.md", folder / "README.md", folder / "report.py"]
    raw = [folder / RAW_SAMPLE.get(name, "results/some_run/metrics.jsonl")]
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", *map(str, kept + raw)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.stdout.split() == [str(p) for p in raw]


@pytest.mark.parametrize("name", TYPED)
def test_the_readme_table_is_the_reports(name):
    """The one results table of the README is copied from results/report.md, line for line."""
    readme = (EXPERIMENTS / name / "README.md").read_text().splitlines()
    report = (EXPERIMENTS / name / "results" / "report.md").read_text().splitlines()
    table = [line for line in readme if line.startswith("|")]
    assert table and [line for line in table if line not in report] == []
    assert sum(line.startswith("|---") for line in table) == 1  # one table


# --- grpo_smollm2 ---------------------------------------------------------------------------------------------------


def _grpo_run(folder: Path, lora: bool, seed: int, after: list[int]) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(f"- +experiment=grpo_smollm2_add\n- seed={seed}\n")
    lr = 0.0005 if lora else 1e-05
    (folder / "config.yaml").write_text(
        f"seed: {seed}\nmodel:\n  lora:\n    enabled: {str(lora).lower()}\ntrainer:\n  lr: {lr}\n  max_steps: 2\n"
        "data:\n  seed: 0\n"
    )
    (folder / "summary.json").write_text(
        json.dumps({"runtime_s": 61.5, "reward_first5_mean": 0.25, "reward_last5_mean": 0.5, "heldout_n": 4})
    )
    steps = [{"step": 1, "reward": 0.25, "entropy": 0.5, "grad_norm": 1.0, "step_time": 2.0}]
    steps.append({"step": 2, "reward": 0.75, "completions/mean_length": 12.5, "step_time": 3.0})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    for tag, correct in (("before", [1, 0, 0, 0]), ("after", after)):
        rows = [
            {"prompt": [{"role": "user", "content": f"What is {q}? Answer with just the number."}], "answer": a}
            | {"completion": f"{q} = {a}" if i == 1 else "7", "correct": float(c)}
            for i, (q, a, c) in enumerate(zip(("1 + 2", "5 - 3", "2 + 2", "9 - 1"), ("3", "2", "4", "8"), correct))
        ]
        (folder / f"heldout_{tag}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "time_v.txt").write_text(
        "\tUser time (seconds): 40.25\n\tSystem time (seconds): 2.75\n"
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:05.50\n\tMaximum resident set size (kbytes): 2097152\n"
    )
    (folder / "loadavg.txt").write_text("start x 1.50 1 1 1/1 1\nend   x 2.25 1 1 1/1 1\n")
    (folder / "commit.txt").write_text("commit abc1234\n")


def test_grpo_smollm2_collect_builds_the_tables_the_report_reads(tmp_path):
    raw = tmp_path / "results"
    for seed, after in ((0, [1, 1, 0, 0]), (1, [1, 0, 1, 0]), (2, [1, 1, 1, 1])):
        _grpo_run(raw / f"lora_s{seed}", True, seed, after)
    _grpo_run(raw / "full_s0", False, 0, [0, 0, 0, 0])  # one seed: a pilot, in the per-run table only
    tables = tmp_path / "tables"
    _report("grpo_smollm2").main(["--collect", str(raw), "--results", str(tables), "--no-plots"])
    runs = (tables / "runs.csv").read_text().splitlines()
    assert runs[0].startswith("run,lora,lr,seed,data_seed,max_steps,runtime_s,")
    assert "lora_s1,1,0.0005,1,0,2,61.5,0.25,0.5,1:05.50,40.25,2.75,2097152,1.50,2.25,abc1234" in runs
    heldout = (tables / "heldout.csv").read_text().splitlines()
    assert heldout[0] == "run,problem,question,op,correct_before,correct_after,lenient_before,lenient_after"
    assert "lora_s0,1,5 - 3,-,0,1,1,1" in heldout  # "5 - 3 = 2": right after an "=", wrong for the checker
    assert len(heldout) == 1 + 4 * 4 and len((tables / "steps.csv").read_text().splitlines()) == 1 + 4 * 2
    text = (tables / "report.md").read_text()
    assert "| LoRA r16, lr 0.0005 | 0, 1, 2 | 0.250 | 0.667 (" in text  # before, after (mean over seeds)
    assert "| lora_s2 | LoRA r16 | 0.0005 | 2 | 0.250 | 1.000 (1.000, 1.000) | +0.750 (" in text
    assert "| 2.50 | 62 | 66 | 43 | 2.00 | 1.50 -> 2.25 |" in text  # s/step, train s, wall s, CPU s, GiB, load
    assert "| full_s0 | full FT | 1e-05 | 0 |" in text and "| full FT, lr 1e-05 |" not in text


# --- grpo_step ------------------------------------------------------------------------------------------------------


def _bench(path: str, seed: int, step_s: float, correct: list[float], **extra) -> dict:
    split = {"generation": step_s / 2, "scoring": 0.0, "rewards": 0.01, "loss_backward": step_s / 2 - 0.03}
    return {
        "bench": "grpo_step",
        "path": path,
        "model": "smollm2_135m",
        "batch": 8,
        "completion_length": 16,
        "train": "lora",
        "steps": 3,
        "seed": seed,
        "set": [],
        "step_s": step_s,
        "cpu_s": step_s - 0.125,
        "split_s": split | {"optimizer": 0.01, "other": 0.01},
        "gen_tokens_per_s": 40.5,
        "peak_rss_mib": 2048.25,
        "rewards": [[0.0, 0.125, 0.5]],
        "heldout_acc_before": 0.25,
        "heldout_acc_after": sum(correct) / len(correct),
        "heldout_gain": sum(correct) / len(correct) - 0.25,
        "heldout_correct": correct,
        **extra,
    }


def test_grpo_step_collect_builds_the_tables_and_the_report_prints_plot_pys_tables(tmp_path):
    raw = tmp_path / "results"
    raw.mkdir()
    for seed in (6, 7):
        trl = _bench("trl", seed, 6.0, [1.0, 0.0, 1.0, 0.0], ratio_vs_trl=1.0, cpu_ratio_vs_trl=1.0)
        ours = _bench("posttrain", seed, 2.4, [1.0, 1.0, 0.0, 0.0], ratio_vs_trl=0.4, cpu_ratio_vs_trl=0.41)
        ours["set"] = ["model.dtype=float32"]
        failed = {"bench": "grpo_step", "path": "posttrain:x", "error": "boom"}
        lines = [json.dumps(r) for r in (trl, ours, failed)]
        (raw / f"maketrain_fp32master_seed{seed}.jsonl").write_text("\n".join(["not json", *lines]) + "\n")
    (raw / "maketrain_fp32master_seed6.progress.jsonl").write_text(json.dumps({"progress": {"path": "trl"}}) + "\n")
    (raw / "make_train_demo").mkdir()
    (raw / "make_train_demo" / "summary.json").write_text(
        json.dumps({"runtime_s": 100.5, "heldout_eval_s": 9.25, "heldout_acc_before": 0.1, "heldout_acc_after": 0.5})
    )
    report = _report("grpo_step")
    tables = tmp_path / "tables"
    report.main(["--collect", str(raw), "--results", str(tables)])
    records = (tables / "records.csv").read_text().splitlines()
    assert len(records) == 1 + 4 and records[0].startswith("record,file,path,set,model,train,batch,")
    assert (tables / "steps.csv").read_text().splitlines()[:3] == ["record,round,step,reward", "0,0,1,0", "0,0,2,0.125"]
    heldout = (tables / "heldout.csv").read_text().splitlines()
    assert heldout == ["problem,0,1,2,3", "0,1,1,1,1", "1,0,1,0,1", "2,1,0,1,0", "3,0,0,0,0"]
    assert (tables / "make_train.csv").read_text().splitlines()[1] == "make_train_demo,100.5,9.25,0.1,0.5,,,,,"
    # the records read back from the tables are those plot.py reads from the files: the same tables
    files = [str(raw / f"maketrain_fp32master_seed{s}.jsonl") for s in (6, 7)]
    text = (tables / "report.md").read_text()
    assert report.plot.table(report.plot.records(files)) in text
    assert "| 7 | posttrain[model.dtype=float32] | 2.40 | 1.20 |" in text
    assert "| make_train_demo | 0.1 -> 0.5 | 100.5 | 9.25 | - | - | - |" in text
    assert (tables / "split_fp32master.png").stat().st_size > 0 and not (tables / "rewards_fp32master.png").exists()


# --- grpo_arith -----------------------------------------------------------------------------------------------------


def test_grpo_arith_collect_builds_the_tables_the_report_reads(tmp_path):
    results = {
        "math": {"eval_math_before": 0.0078125, "eval_math_after": 0.25, "train_math_first10": 0.0046875}
        | {"train_math_last10": 0.5, "train_runtime_s": 12.5, "eval_prompts": 4},
        "math+format": {"eval_math_before": 0.0, "eval_math_after": 0.125, "train_math_first10": 0.0}
        | {"train_math_last10": 0.0, "train_runtime_s": 7.0, "eval_prompts": 4}
        | {"eval_numeric_answer_before": 0.5, "eval_numeric_answer_after": 1.0},
        "constant_answer_baseline": {"answer": "1", "reward": 0.328125},
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "metrics_math.jsonl").write_text(
        "".join(json.dumps({"step": s, "rewards/math/mean": s / 4, "frac_reward_zero_std": 1.0}) + "\n" for s in (1, 2))
    )
    rows = [{"step": 1, "rewards/math/mean": 0.0, "rewards/numeric_answer/mean": 0.5, "frac_reward_zero_std": 0.5}]
    (tmp_path / "metrics_math_format.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tables = tmp_path / "tables"
    _report("grpo_arith").main(["--collect", str(tmp_path), "--results", str(tables)])
    eval_rows = (tables / "eval.csv").read_text().splitlines()
    assert eval_rows[:3] == ["condition,metric,value", "math,eval_math_before,0.0078125", "math,eval_math_after,0.25"]
    assert "constant_answer_baseline,answer,1" in eval_rows and len(eval_rows) == 1 + 6 + 8 + 2
    steps = (tables / "steps.csv").read_text().splitlines()
    assert steps[1] == "math,1,,0.25,,1,,," and steps[3] == "math+format,1,,0,0.5,0.5,,,"
    text = (tables / "report.md").read_text()
    assert "| math reward | 0.8% | 25.0% | — | — |" in text
    assert "| math + 0.5 × numeric_answer | 0.0% | 12.5% | 50.0% | 100.0% |" in text
    assert '| always answer "1" (most frequent training answer) | 32.8% | | | |' in text
    assert "| math reward | 4 | 12 | 0.0047 | 0.5000 | 2 | 1.000 |" in text
    assert (tables / "reward_curve.png").stat().st_size > 0


# --- gpu ------------------------------------------------------------------------------------------------------------


def test_gpu_collect_builds_checks_csv_from_a_lease_folder(tmp_path):
    lease = tmp_path / "results" / "2026-12-01_demo"
    lease.mkdir(parents=True)
    (lease / "log_1.txt").write_text(
        "=== env (limit 20 s, at 2 s): bash -c nvidia-smi -L; ...\n"
        "GPU 0: NVIDIA Demo 80GB (UUID: GPU-0)\n"
        "2.11.0+cu130 13.0 NVIDIA Demo 80GB 3.6.0 5.23.0 1.16.0 0.21.2 1.15.0 5.2.0 25.0.1\n"
        "abc1234\n=== env: rc=0 in 15 s\n=== loss_2048: rc=0 in 65 s\n=== step: rc=0 in 40 s\n"
        "=== d2l: SKIPPED (17 s of the budget left)\n=== done in 120 s\n"
    )
    loss = {"check": "loss_2048", "bench": "grpo_loss", "shape": [2048, 2880, 201088], "times": [0.01]}
    records = [
        {"check": "loss_2048", "progress": {"backend": "two_gemm"}},
        loss
        | {"backend": "two_gemm", "seconds": 0.006, "median_seconds": 0.0065, "peak_mib": 797.25}
        | {"ratio_vs_two_gemm": 1.0},
        loss
        | {"backend": "fused", "seconds": 0.0105, "median_seconds": 0.011, "peak_mib": 361.0}
        | {"ratio_vs_two_gemm": 1.75},
    ]
    step = {"check": "step", "bench": "grpo_step", "step_s": 0.8, "gen_tokens_per_s": 200.0, "peak_cuda_gib": 0.75}
    records += [
        step | {"path": "trl", "split_s": {"generation": 0.6, "loss_backward": 0.2}},
        step | {"path": "posttrain", "step_s": 0.2, "split_s": {"generation": 0.1, "loss_backward": 0.09}},
    ]
    (lease / "results_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (lease / "fold_sweep.log").write_text(
        json.dumps({"fold": {"tile": [2048, 28800], "rows": 1, "block": 2048, "warps": 8, "ms": 0.15, "tb_per_s": 3.5}})
        + "\n"
        + json.dumps({"best": [1, 2048, 8], "best_ms": 0.3, "default": [4, 1024, 8], "default_ms": 0.4})
        + "\n"
    )
    (lease / "make_train_grpo.log").write_text(
        "step 1/2\n"
        + json.dumps({"run_dir": "/tmp/r", "runtime_s": 50.5, "heldout_acc_before": 0.1, "heldout_acc_after": 0.6})
        + "\ngrpo rc=0 wall=60 s\n"
    )
    rows = [{"step": 1, "step_time": 30.0, "reward": 0.0}, {"step": 2, "step_time": 0.5, "sampling/sampler_kl": 0.003}]
    (lease / "make_train_grpo_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tables = tmp_path / "tables"
    _report("gpu").main(["--collect", str(tmp_path / "results"), "--results", str(tables)])
    lines = (tables / "checks.csv").read_text().splitlines()
    assert lines[0] == "lease,device,commit,check,item,metric,value"
    head = "2026-12-01_demo,NVIDIA Demo 80GB,abc1234,"
    assert head + "env,,torch,2.11.0+cu130" in lines and head + "env,,pyarrow,25.0.1" in lines
    assert (
        head + "loss_2048,fused,seconds,0.0105" in lines
        and head + 'loss_2048,fused,shape,"[2048, 2880, 201088]"' in lines
    )
    assert head + "step,trl,split_s.generation,0.6" in lines and head + "d2l,log_1,skipped_with_s_left,17" in lines
    assert head + "fold_sweep,tile 2048x28800 rows 1 block 2048 warps 8,tb_per_s,3.5" in lines
    assert (
        head + "make_train_grpo,summary,wall_s,60" in lines and head + "make_train_grpo,step 2,step_time,0.5" in lines
    )
    assert not any(",progress," in line for line in lines)
    text = (tables / "report.md").read_text()
    assert "## 2026-12-01_demo: NVIDIA Demo 80GB, commit abc1234" in text
    assert "| 2048 x 2880 x 201088 | fused | 10.50 | 11.00 | 1.750 | 361.0 |" in text
    assert "| posttrain | 0.200 | 0.25x | 0.100 | 0.090 | 200.0 | 0.75 |" in text
    assert (
        "| log_1 | d2l | skipped (17 s of the budget left) | - |" in text
        and "| log_1 | all (checks.sh) | done | 120 |" in text
    )
    assert "best [1, 2048, 8] in 0.3 ms; default [4, 1024, 8] in 0.4 ms" in text
    assert "held-out 0.1 -> 0.6" in text and "first step 30.00 s, median of the others 0.5000 s" in text


# --- kernels --------------------------------------------------------------------------------------------------------


def _loss_bench(backend: str, seconds: float, peak: float, ratio: float, **extra) -> dict:
    rec = {"bench": "grpo_loss", "backend": backend, "shape": [2, 3, 5], "dtype": "fp32", "threads": None}
    return (
        rec
        | {"seconds": seconds, "times": [seconds * 2, seconds], "peak_mib": peak, "ratio_vs_two_gemm": ratio}
        | extra
    )


def test_kernels_collect_merges_bench_lines_into_the_tables(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    record = [
        _loss_bench("two_gemm", 2.0, 500.4, 1.0, loadavg=[1.04, 1.25]),
        _loss_bench("fused", 2.0625, 16.5, 1.031, loadavg=[1.5, 1.75]),
        _loss_bench("fused@tiles", 3.0, 20.0, 1.5, loadavg=[2.0, 2.0]),
    ]
    (raw / "2x3x5_fp32_idle2.jsonl").write_text("not json\n" + "".join(json.dumps(r) + "\n" for r in record))
    (raw / "2x3x5_fp32_idle2.progress.jsonl").write_text(json.dumps({"progress": {"backend": "fused"}}) + "\n")
    eager = [
        _loss_bench("eager", 4.0, 1500.0, 2.0, ratio_vs_eager=1.0),
        {"bench": "grpo_loss", "backend": "liger", "shape": [2, 3, 5], "dtype": "fp32", "error": "not installed"},
    ]
    (raw / "2x3x5_all_backends_demo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eager))
    accuracy = {"case": "bf16", "logp": 1.23e-07, "entropy": 5.9e-07, "dh": 0.0016, "dw": 0.00234, "far_logp_err": 2e-5}
    (raw / "accuracy.jsonl").write_text(json.dumps(accuracy) + "\n")
    tables = tmp_path / "tables"
    report = _report("kernels")
    report.main(["--collect", str(raw), "--results", str(tables)])
    bench = (tables / "bench.csv").read_text().splitlines()
    assert bench[0] == "run,backend,shape,dtype,threads,seconds,times,peak_mib,loadavg,ratio_vs_eager," + (
        "mem_ratio_vs_eager,ratio_vs_two_gemm,error"
    )
    assert len(bench) == 1 + 5 and '2x3x5_fp32_idle2,fused,2x3x5,fp32,,2.0625,"[4.125, 2.0625]",16.5,' in bench[4]
    assert (tables / "accuracy.csv").read_text().splitlines()[
        1
    ] == "bf16,accuracy,1.23e-07,5.9e-07,0.0016,0.00234,2e-05"
    text = (tables / "report.md").read_text()
    assert "| 2, 3, 5 | fp32 | 2.000 | **2.063** | **1.031** | 1.500 | 500 / 17 |" in text  # halves round up
    assert "| **fused** | **2.0625** | 4.1250, 2.0625 | 1.5, 1.8 | **17** | 1.031 |" not in text  # 3 digits
    assert "| **fused** | **2.063** | 4.125, 2.063 | 1.5, 1.8 | **17** | 1.031 |" in text
    assert "| eager | 4.000 | 8.000, 4.000 | 1500 | 1.0 | 2.0 |" in text and "| liger | error: not installed |" in text
    assert "| bf16 | 1.2e-7 | 5.9e-7 | 1.6e-3 | 2.3e-3 | 2.0e-5 |" in text
    # a later collect of one run replaces that run's rows and keeps the others
    (raw / "2x3x5_all_backends_demo.jsonl").write_text(json.dumps(_loss_bench("eager", 5.0, 1.0, 2.5)) + "\n")
    report.main(["--collect", str(raw / "2x3x5_all_backends_demo.jsonl"), "--results", str(tables)])
    bench = (tables / "bench.csv").read_text().splitlines()
    assert len(bench) == 1 + 4 and sum(line.startswith("2x3x5_fp32_idle2,") for line in bench) == 3


# --- memory_plan ----------------------------------------------------------------------------------------------------


def test_memory_plan_collect_merges_validate_output_into_rss_csv(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "rss.csv").write_text(
        "case,params_m,trainable_m,planned_gib,measured_gib,error,source\nM-full,56.0,55.98,1.955,2.084,-0.062,README\n"
    )
    case = {"case": "S-lora", "params_total": 19288832, "params_trainable": 57344, "planned_gib": 0.8091}
    case |= {"measured_gib": 0.904, "error": -0.105, "components_gib": {"weights": 0.07}}
    out = tmp_path / "validate.txt"
    out.write_text(json.dumps(case) + "\n\n| case | params |\n|---|---|\n| S-lora | 19.3M |\n")
    _report("memory_plan").main(["--collect", str(out), "--results", str(tables)])
    rows = (tables / "rss.csv").read_text().splitlines()
    assert rows[1:] == [
        "M-full,56.0,55.98,1.955,2.084,-0.062,README",
        "S-lora,19.288832,0.057344,0.8091,0.904,-0.105,validate.txt",
    ]
    text = (tables / "report.md").read_text()
    assert "| S-lora | 19.3M | 0.06M | 0.809 | 0.904 | -10.5% |" in text
    assert "| M-full | 56.0M | 55.98M | 1.955 | 2.084 | -6.2% |" in text and "Rows from: README; validate.txt." in text


# --- reliability ----------------------------------------------------------------------------------------------------


def _case_record(case, stderr: list[str], problems: list[str] = (), created: list[str] = ()) -> dict:
    rec = {"id": case.id, "problem": case.problem, "args": " ".join(case.args), "exit": 2, "stderr": stderr}
    return rec | {
        "changed": [],
        "created": list(created),
        "problems": list(problems),
        "seconds": 1.25,
        "mode": "subprocess",
    }


def test_reliability_collect_and_cases_py_write_the_csv_the_report_reads(tmp_path, monkeypatch):
    from experiments.reliability import cases

    quiet = next(c for c in cases.CASES if c.writes_nothing)
    loud = next(c for c in cases.CASES if not c.writes_nothing)
    records = [
        _case_record(quiet, ["error: a | b"]),
        _case_record(loud, ["warning: x", "error: y"], ["2 stderr lines"], ["run/cli.log"]),
    ]
    (tmp_path / "results.json").write_text(json.dumps(records))
    tables = tmp_path / "tables"
    report = _report("reliability")
    report.main(["--collect", str(tmp_path / "results.json"), "--results", str(tables)])
    rows = (tables / "cases.csv").read_text().splitlines()
    assert rows[0] == "id,problem,args,exit,stderr,changed,created,problems,seconds,mode,writes_nothing"
    assert rows[1].endswith(',2,"[""error: a | b""]",[],[],[],1.25,subprocess,1')
    text = (tables / "report.md").read_text()
    assert text.startswith("<!-- python experiments/reliability/report.py -->\n\n1/2 cases hold the contract")
    assert "1 of the 1 `writes_nothing` cases created no file; 2 s of subprocesses in all." in text
    assert f"| 1 | {quiet.problem} | 2 | yes |" in text and f"| 2 | {loud.problem} | 2 | NO: 2 stderr lines |" in text
    assert "| `error: a \\| b` | yes |" in text and "| `warning: x ⏎ error: y` | NO: 2 stderr lines |" in text
    assert report.read_cases(tables / "cases.csv")[1] == records[1] | {"writes_nothing": False}
    # cases.py merges a run into results/cases.csv (in the case list's order) and rewrites report.md
    monkeypatch.setattr(cases, "RESULTS", tables / "cases.csv")
    merged = cases.write_outputs([_case_record(loud, ["error: fixed"]) | {"writes_nothing": False}])
    assert [r["id"] for r in merged] == [c.id for c in cases.CASES if c.id in (quiet.id, loud.id)]
    assert "2/2 cases hold the contract" in (tables / "report.md").read_text()


# --- contrastive_tiny -----------------------------------------------------------------------------------------------


def test_contrastive_tiny_collect_reads_the_run_dirs(tmp_path):
    runs = tmp_path / "runs"
    before = {"asr_heldout": 0.875, "asr_train_templates": 0.5, "utility_benign": 0.125, "utility_injected": 0.0}
    before |= {"n_heldout": 8, "n_train_templates": 4, "asr_by_type": {"ignore": 1.0, "role_play": 0.75}}
    before |= {"tables": {"by_type": []}, "flag": True}
    after = {"asr_heldout": 0.0, "asr_train_templates": 0.25, "utility_benign": 0.25, "utility_injected": 0.125}
    for run, extra in (("vulnerable", {}), ("contrastive", {"utility_benign": 0.5}), ("lm_only", {})):
        (runs / run).mkdir(parents=True)
        (runs / run / "summary.json").write_text(json.dumps({"eval_before": before, "eval_after": after | extra}))
    log = [{"step": s, "lm_loss": 1.0 if s <= 10 else 0.5, "nce": 2.0} for s in range(1, 61)]
    (runs / "contrastive" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    probe = {"pooled_cos_benign_counterfactual": 0.9876, "pooled_cos_benign_injected": 0.5}
    probe |= {"head_cos_benign_counterfactual": 0.25, "head_cos_benign_injected": -0.0875, "injected_replies": []}
    (runs / "contrastive" / "probe.json").write_text(json.dumps(probe))
    tables = tmp_path / "tables"
    _report("contrastive_tiny").main(["--collect", str(runs), "--results", str(tables)])
    rows = (tables / "metrics.csv").read_text().splitlines()
    assert rows[0] == "run,source,metric,value" and "contrastive,eval_before,asr_by_type/role_play,0.75" in rows
    assert "contrastive,train,lm_loss_last50,0.5" in rows and "contrastive,train,nce_last50,2.0" in rows
    assert not any(",flag," in r or ",tables," in r or "injected_replies" in r for r in rows)
    text = (tables / "report.md").read_text()
    assert "| weights | held-out ASR (n=8) | train-template ASR (n=4) |" in text
    assert "| before: vulnerable start (both runs start here) | 0.88 | 0.50 | 0.12 | 0.00 |" in text
    assert "| after: contrastive + LM | 0.00 | 0.25 | 0.50 | 0.12 |" in text
    assert "| role_play | 0.75 | - | - |" in text and "| contrastive + LM | 0.50 | 2.00 |" in text
    assert "| contrastive + LM | 0.988 | 0.500 | 0.250 | -0.087 |" in text


# --- d2l_tiny -------------------------------------------------------------------------------------------------------


def test_d2l_tiny_collect_builds_the_tables_and_keeps_typed_in_values(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    scores = {"no_context": 6.0465, "in_context": 5.9204, "d2l": 3.5555, "d2l_other_doc": 4.0709}
    data = {"num_docs": 2, "num_questions": 4, "internalize_ms_per_doc": 7.25}
    data |= {c: {"answer_loss": v, "exact_match": 0.25, "rouge_l": 0.5} for c, v in scores.items()}
    data["examples"] = [
        {"question": "Where?", "answer": "Oslo", "no_context": "\x1d|x", "in_context": "", "d2l": "blog"}
    ]
    (raw / "X_init0.1_20steps_500docs_eval.json").write_text(json.dumps(data))
    summary = {"runtime_s": 12.5, "final_step": 20, "ce_loss_first5_mean": 4.555, "ce_loss_last5_mean": 3.2}
    summary |= {"internalize_ms_per_doc": 7.25, "eval_d2l_answer_loss": 3.5555}
    (raw / "X_init0.1_20steps_500docs_summary.json").write_text(json.dumps(summary))
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "runs.csv").write_text("run,initializer_range,num_train,answer_ce_floor\nX,,,4.54\n")
    (tables / "budget.csv").write_text(
        "task,steps,seed,no_context,d2l,d2l_other_doc,other_minus_d2l,wall_s\ndemo,150,0,5.964,2.943,3.477,0.53,89\n"
    )
    _report("d2l_tiny").main(["--collect", str(raw), "--results", str(tables)])
    runs = list(csv.DictReader((tables / "runs.csv").open()))
    assert runs[0]["file"] == "X_init0.1_20steps_500docs" and runs[0]["answer_ce_floor"] == "4.54"
    assert (runs[0]["initializer_range"], runs[0]["num_train"], runs[0]["runtime_s"]) == ("0.1", "500", "12.5")
    assert "eval_d2l_answer_loss" not in runs[0]
    assert (tables / "eval.csv").read_text().splitlines()[3] == "X,d2l,3.5555,0.25,0.5"
    assert json.loads(next(csv.DictReader((tables / "examples.csv").open()))["no_context"]) == "\x1d|x"
    text = (tables / "report.md").read_text()
    assert "## Held-out documents (2 docs, 4 questions)" in text
    assert "| X (init 0.1, 500 docs) | 20 (13 s) | no context | 6.047 | 0.25 | 0.50 |" in text
    assert "| | | **D2L** | **3.556** | 0.25 | 0.50 |" in text  # halves round up
    assert "| X | 4.56 -> 3.20 | 7.3 | -2.49 | 0.52 | -2.36 | 4.54 |" in text
    assert "| 150 | 0 | 5.964 | 2.943 | 3.477 | 0.53 | 89 s |" in text
    assert '| X | Where? | Oslo | `"\\u001d\\|x"` | `""` | `"blog"` | `` |' in text
