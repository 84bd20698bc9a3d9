"""experiments/grpo_objectives: the report's gains, t intervals and pairing against the preset each arm changed,
on run dirs written here and collected into the two CSV files the report reads, and the committed report.md
regenerated from the committed CSV files (the runs themselves are the experiment's)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import experiment_script

HERE = Path(__file__).resolve().parents[3] / "experiments" / "grpo_objectives"


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
    assert set(run.RETIRED) <= set(run.ARMS)  # still reported, no longer run
    # issue 62's final test: every rival against today's preset, all of them on problems 200-499 alone
    assert {run.base_arm(arm) for arm in run.TEST_ARMS} == {"test_preset"}
    assert all(run.overrides(arm)[-2:] == run.TEST for arm in run.TEST_ARMS)


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
    assert recipe(*run.TEST) == recipe(*run.overrides("test_preset"))  # the final test scores today's preset
    assert preset != recipe(*run.overrides("dapo"))  # the test can tell arms apart


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
    make-train arm) and the arms on it (`p_cdf_*`, the final test's `TEST_ARMS`) choose their own."""
    run = _module("run")
    sampler = {arm: [o for o in run.overrides(arm) if o.startswith("algo.generation.sampler=")] for arm in run.ARMS}
    on_cdf = [arm for arm in run.ARMS if arm == run.CDF_ARM or arm.startswith("p_cdf_") or arm in run.TEST_ARMS]
    assert len(on_cdf) >= 2 and all(sampler[arm] == ["algo.generation.sampler=inverse_cdf"] for arm in on_cdf)
    assert all(v == [run.OLD_SAMPLER] for arm, v in sampler.items() if arm not in on_cdf)


def _write_run(
    folder: Path, summary: dict, before: list[tuple[str, float]] | None, after: list[tuple[str, float]] | None
):
    """A run dir as run.py leaves it (the files the report's collect step reads): summary.json and the held-out
    replies before and after training, one JSON object per line."""
    folder.mkdir(parents=True)
    values = {"algo": "grpo", "logged_steps": 60, "final_step": 60, "heldout_n": 200, "heldout_eval_s": 70.0}
    (folder / "summary.json").write_text(json.dumps(values | summary, indent=2))
    for name, answers in (("before", before), ("after", after)):
        if answers is None:
            continue
        rows = [
            {"prompt": [{"role": "user", "content": q}], "answer": "0", "completion": "0", "correct": c}
            for q, c in answers
        ]
        (folder / f"heldout_{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def _question(a: int, op: str, b: int) -> str:
    return f"What is {a} {op} {b}? Answer with just the number."


def _report(report, results: Path, *args: str) -> dict[str, list[str]]:
    """report.py's main on `results`, its table's rows by arm (the cells of each)."""
    report.main(["--results", str(results), "--plot", str(results / "gains.png"), *args])
    lines = (results / "report.md").read_text().splitlines()
    assert lines[0] == "<!-- python experiments/grpo_objectives/report.py -->"
    return {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[1:]}


def test_report_table(tmp_path):
    report = _module("report")
    after = {"preset": [0.4, 0.5, 0.45], "lr5e-4": [0.3, 0.1, 0.35], "dapo": [0.2, 0.3]}
    questions = [_question(12, "+", 30), _question(40, "-", 12), _question(50, "+", 1)]
    # preset: + right on seed 0 and - right on seed 1 (50 + 1 right on both); seed 2 and the other arms wrote none
    answers = {0: (1.0, 0.0, 1.0), 1: (0.0, 1.0, 1.0)}
    for arm, values in after.items():
        for seed, acc in enumerate(values):
            summary = {"heldout_acc_before": 0.1, "heldout_acc_after": acc, "runtime_s": 100.0 + seed}
            replies = list(zip(questions, answers[seed])) if arm == "preset" and seed in answers else None
            _write_run(tmp_path / arm / f"seed{seed}", summary, None, replies)
    rows = _report(report, tmp_path, "--collect")
    mean, lo, hi = report.t_ci([0.3, 0.4, 0.35])
    # the preset's gains 0.3, 0.4, 0.35 (seed 2 wrote no per-problem rows: the t-interval over seeds): sd 0.05,
    # half-width t(0.975, 2) * sd / sqrt(3)
    assert mean == pytest.approx(0.35) and hi - mean == pytest.approx(4.302653 * 0.05 / math.sqrt(3), rel=1e-5)
    assert lo == pytest.approx(2 * mean - hi)
    assert rows["preset"][1] == "0,1,2" and rows["preset"][5].startswith("+0.350 [")
    assert rows["preset"][3] == "0.400-0.500"  # after training, the lowest and highest seed
    # addition: 3 right of 4 answers over seeds 0-1 (seed 2 wrote none); subtraction: 1 of 2
    assert rows["preset"][4] == "0.75 / 0.50" and rows["dapo"][4] == "nan / nan"
    # dapo pairs with lr5e-4 on seeds 0-1: (0.1 - 0.2, 0.2 - 0.0) -> mean +0.050
    assert rows["dapo"][7].startswith("+0.050 [") and rows["dapo"][7].endswith("vs lr5e-4 (n=2)")
    assert rows["lr5e-4"][7].endswith("vs preset (n=3)") and rows["lr5e-4"][6] == "+0.000"
    assert (tmp_path / "gains.png").stat().st_size > 0


def test_collect_builds_the_csv_files_the_report_reads(tmp_path, capsys):
    """2 arms x 2 seeds of run dirs -> runs.csv (one row per run, in the order of their paths), heldout.csv (one
    row per run x problem: the reply after training) and problems.csv (one per problem, with the base model's reply
    before training, the same in every run); the report from them alone, the run dirs gone."""
    report = _module("report")
    questions = [_question(12, "+", 30), _question(40, "-", 12), _question(50, "+", 1), _question(9, "-", 4)]
    before = (1.0, 0.0, 0.0, 0.0)
    after = {
        ("preset", 0): (1.0, 0.0, 1.0, 0.0),
        ("preset", 1): (1.0, 1.0, 0.0, 0.0),
        ("lr2e-4_dynamic_sampling", 0): (1.0, 1.0, 1.0, 0.0),
        ("lr2e-4_dynamic_sampling", 1): (1.0, 1.0, 1.0, 1.0),
    }
    raw = tmp_path / "raw"
    for (arm, seed), correct in after.items():
        summary = {"heldout_acc_before": 0.25, "heldout_acc_after": sum(correct) / 4, "runtime_s": 300.25 + seed}
        _write_run(raw / arm / f"seed{seed}", summary, list(zip(questions, before)), list(zip(questions, correct)))
    runs_csv, heldout_csv, problems_csv = report.collect(raw)
    with runs_csv.open() as f:
        runs = list(csv.DictReader(f))
    assert [(r["run"], r["arm"], r["seed"]) for r in runs] == [
        ("0", "lr2e-4_dynamic_sampling", "0"),
        ("1", "lr2e-4_dynamic_sampling", "1"),
        ("2", "preset", "0"),
        ("3", "preset", "1"),
    ]
    assert runs[3] == {
        "run": "3",
        "arm": "preset",
        "seed": "1",
        "heldout_acc_before": "0.25",
        "heldout_acc_after": "0.5",
        "runtime_s": "301.25",
        "commit": "",  # not committed: no commit holds the run's files
    }
    with heldout_csv.open() as f:
        items = list(csv.reader(f))
    assert items[0] == ["run", "item", "correct_after"]
    assert len(items) == 1 + 4 * 4
    assert items[1:5] == [["0", "0", "1"], ["0", "1", "1"], ["0", "2", "1"], ["0", "3", "0"]]
    assert [row[2] for row in items[13:]] == ["1", "1", "0", "0"]  # preset seed 1
    with problems_csv.open() as f:
        assert list(csv.reader(f)) == [
            ["item", "question", "operation", "correct_before"],
            *([str(i), q, op, b] for i, (q, op, b) in enumerate(zip(questions, "+-+-", "1000"))),
        ]
    data = tmp_path / "data"  # the two CSV files alone
    data.mkdir()
    for path in (runs_csv, heldout_csv, problems_csv):
        (data / path.name).write_bytes(path.read_bytes())
    rows = _report(report, data)
    # the preset's per-problem gains (0, 0, 1, 0) and (0, 1, 0, 0): 0.25 on both seeds, the problems differ; the
    # interval is the seeds x problems bootstrap of that table, the paired one of the per-problem differences
    from posttrain.analysis.stats import seeds_items_ci

    preset = [[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    mean, (lo, hi) = seeds_items_ci(preset)
    assert lo < mean == 0.25 < hi
    assert rows["preset"][1:7] == [
        "0,1",
        "0.500",
        "0.500-0.500",
        "0.75 / 0.25",
        f"+0.250 [{lo:+.3f}, {hi:+.3f}]",
        "+0.250",
    ]
    dynamic_gains = [[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]]
    d, (dlo, dhi) = seeds_items_ci([[a - b for a, b in zip(x, y)] for x, y in zip(dynamic_gains, preset)])
    dynamic = rows["lr2e-4_dynamic_sampling"]
    assert dynamic[2:5] == ["0.875", "0.750-1.000", "1.00 / 0.75"] and dynamic[5].startswith("+0.625 [")
    assert dynamic[7] == f"+0.375 [{dlo:+.3f}, {dhi:+.3f}] vs preset (n=2)" and dynamic[8] == "301 |"
    assert capsys.readouterr().out.splitlines()[:4] == (data / "report.md").read_text().splitlines()[1:]


@pytest.mark.parametrize("folder", ["results", "test_results"])
def test_the_committed_report_is_the_committed_tables(tmp_path, folder):
    """results/report.md (and test_results/report.md, issue 62's final test) is what report.py makes of its folder's
    runs.csv, heldout.csv and problems.csv, byte for byte (the CSV files copied alone: nothing else is read)."""
    report = _module("report")
    for name in (report.RUNS_CSV, report.HELDOUT_CSV, report.PROBLEMS_CSV):
        (tmp_path / name).write_bytes((HERE / folder / name).read_bytes())
    report.main(["--results", str(tmp_path), "--plot", str(tmp_path / "gains.png")])
    assert (tmp_path / "report.md").read_bytes() == (HERE / folder / "report.md").read_bytes()
    assert (tmp_path / "gains.png").stat().st_size > 0


def test_collect_keeps_the_rows_of_runs_whose_dir_is_gone(tmp_path):
    """A fresh clone has the CSVs but no run dirs: collecting a new run adds it and keeps every collected row."""
    import shutil

    report = _module("report")
    questions = [_question(12, "+", 30), _question(40, "-", 12)]
    raw = tmp_path / "raw"
    for arm, correct in (("preset", (1.0, 0.0)), ("zeta", (0.0, 1.0))):
        summary = {"heldout_acc_before": 0.0, "heldout_acc_after": sum(correct) / 2, "runtime_s": 300.0}
        _write_run(raw / arm / "seed0", summary, list(zip(questions, (0.0, 0.0))), list(zip(questions, correct)))
    report.collect(raw)
    first = {p.name: p.read_text() for p in raw.glob("*.csv")}
    shutil.rmtree(raw / "preset")
    shutil.rmtree(raw / "zeta")
    summary = {"heldout_acc_before": 0.0, "heldout_acc_after": 1.0, "runtime_s": 200.0}
    _write_run(raw / "new" / "seed3", summary, list(zip(questions, (0.0, 0.0))), list(zip(questions, (1.0, 1.0))))
    runs_csv, heldout_csv, problems_csv = report.collect(raw)
    with runs_csv.open() as f:
        runs = list(csv.DictReader(f))
    assert [(r["run"], r["arm"], r["seed"], r["heldout_acc_after"]) for r in runs] == [
        ("0", "new", "3", "1.0"),
        ("1", "preset", "0", "0.5"),
        ("2", "zeta", "0", "0.5"),
    ]
    with heldout_csv.open() as f:
        rows = [["0", "0", "1"], ["0", "1", "1"], ["1", "0", "1"], ["1", "1", "0"], ["2", "0", "0"], ["2", "1", "1"]]
        assert list(csv.reader(f))[1:] == rows
    assert problems_csv.read_text() == first["problems.csv"]
    # nothing new: collecting again from the CSVs alone leaves them as they are
    shutil.rmtree(raw / "new")
    before = {p.name: p.read_text() for p in raw.glob("*.csv")}
    report.collect(raw)
    assert {p.name: p.read_text() for p in raw.glob("*.csv")} == before


def test_collect_refuses_runs_that_ask_different_problems(tmp_path):
    """problems.csv holds one question per item: a run whose item 1 is another problem is refused, naming it, by
    the other runs' folders and by the collected rows alone."""
    report = _module("report")
    raw = tmp_path / "raw"
    first, second = [_question(1, "+", 2), _question(3, "-", 1)], [_question(1, "+", 2), _question(3, "+", 1)]
    for seed, questions in enumerate((first, second)):
        answers = [(q, 1.0) for q in questions]
        summary = {"heldout_acc_before": 1.0, "heldout_acc_after": 1.0, "runtime_s": 1.0}
        _write_run(raw / "preset" / f"seed{seed}", summary, answers, answers)
    with pytest.raises(ValueError, match="seed1: held-out problem 1 is not the other runs'"):
        report.collect(raw)
    # against collected rows alone (a fresh clone): another problem of the same operation is refused too
    (raw / "preset" / "seed1" / "summary.json").unlink()
    report.collect(raw)
    (raw / "preset" / "seed0" / "summary.json").unlink()
    third = [(q, 1.0) for q in (_question(1, "+", 2), _question(4, "-", 1))]
    _write_run(
        raw / "other" / "seed0", {"heldout_acc_before": 1.0, "heldout_acc_after": 1.0, "runtime_s": 1.0}, third, third
    )
    with pytest.raises(ValueError, match="other/seed0: held-out problem 1 is not the collected runs'"):
        report.collect(raw)


def test_collect_refuses_a_run_that_answered_otherwise_before_training(tmp_path):
    """Every run starts from the base model, so problems.csv keeps its reply before training once; a run whose reply
    before training differs (another model or evaluation) is refused, naming it, also against collected rows."""
    report = _module("report")
    raw = tmp_path / "raw"
    questions = [_question(1, "+", 2), _question(3, "-", 1)]
    summary = {"heldout_acc_before": 0.5, "heldout_acc_after": 1.0, "runtime_s": 1.0}
    _write_run(raw / "preset" / "seed0", summary, list(zip(questions, (1.0, 0.0))), list(zip(questions, (1.0, 1.0))))
    report.collect(raw)
    (raw / "preset" / "seed0" / "summary.json").unlink()  # its rows are kept from the CSVs now
    _write_run(raw / "other" / "seed0", summary, list(zip(questions, (0.0, 1.0))), list(zip(questions, (1.0, 1.0))))
    with pytest.raises(ValueError, match="other/seed0: held-out problem 0's reply before training is not the other"):
        report.collect(raw)


def test_load_refuses_a_run_whose_accuracy_before_is_not_the_shared_replies(tmp_path):
    """A run that wrote no heldout_before.jsonl takes its gains from problems.csv's shared before-replies; that is
    only its gain when it started where they did, so a run whose own summary says another accuracy before training
    is refused, and one that agrees is loaded with those gains."""
    report = _module("report")
    raw = tmp_path / "raw"
    questions = [_question(1, "+", 2), _question(3, "-", 1)]
    summary = {"heldout_acc_before": 0.5, "heldout_acc_after": 1.0, "runtime_s": 1.0}
    _write_run(raw / "preset" / "seed0", summary, list(zip(questions, (1.0, 0.0))), list(zip(questions, (1.0, 1.0))))
    _write_run(raw / "other" / "seed0", summary, None, list(zip(questions, (0.0, 1.0))))
    report.collect(raw)
    runs, _ = report.load(raw)
    assert runs["other"][0]["gains"] == [-1.0, 1.0] and runs["preset"][0]["gains"] == [0.0, 1.0]
    _write_run(raw / "third" / "seed0", summary | {"heldout_acc_before": 0.0}, None, list(zip(questions, (1.0, 1.0))))
    report.collect(raw)
    with pytest.raises(ValueError, match=r"third seed 0: heldout_acc_before 0\.0 is not the shared .* 0\.5"):
        report.load(raw)
