"""experiments/d2l_smollm2 end to end at tiny scale: run.sh's commands on model=tiny_llama (two seeds trained, the
long-document evaluation of one), then report.py; its pooled numbers are the seeds' own. report.py's tables, its
compact CSVs (--collect from raw run folders; the committed results/report.md regenerated from the committed CSVs)
and the scripts beside it."""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import experiment_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "experiments" / "d2l_smollm2" / "run.sh"
RESULTS = SCRIPT.parent / "results"


@pytest.mark.slow
def test_run_script_and_report_at_tiny_scale(tmp_path):
    env = {**os.environ, "SCALE": "tiny", "SEEDS": "0 1", "MULTIPLES": "2", "OUT": str(tmp_path), "PY": sys.executable}
    # s1_x2 is s0_x2's command with another seed: the long-document set is checked on one seed
    runs = ["s0", "s0_x2", "s1"]
    proc = subprocess.run(["bash", str(SCRIPT), *runs], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = tmp_path / "results"
    assert sorted(p.name for p in res.iterdir()) == runs
    trained = json.loads((res / "s0" / "eval.json").read_text())
    assert trained["conditions"] == [
        "no_context", "in_context", "in_context_truncated", "d2l", "d2l_other_doc", "d2l_other_entity",
        "in_context_other_entity", "format_lora", "cd",
    ]  # fmt: skip
    long = json.loads((res / "s0_x2" / "eval.json").read_text())
    assert "format_lora" not in long["conditions"] and long["context_window"] == 256
    assert all(400 < p["doc_tokens"] <= 512 for p in long["per_question"])  # 2 x the 256-token window
    assert [p["question"] for p in long["per_question"]] == [p["question"] for p in trained["per_question"]]
    mod = experiment_script(SCRIPT.parent / "report.py")
    mod.main(["--results", str(res)])
    text = (res / "report.md").read_text()
    assert "| D2L (own document) | " in text and "| context distillation (per document) | " in text
    assert (
        "| format-only LoRA | " in text and "| D2L: the same kind of question about another document's entity |" in text
    )
    assert "| in context: binding, own question minus the other entity's (paired) | - | - | " in text
    assert "x2 (" in text and "(seeds " in text and (res / "accuracy_vs_length.png").stat().st_size > 0
    # pooled over seeds question by question: with the same answer tokens, the seeds' mean of their own numbers
    sets = mod.load_runs(res)
    assert list(sets) == ["facts", "x2"] and sorted(sets["facts"]) == [0, 1] and list(sets["x2"]) == [0]
    summaries = [json.loads((res / f"s{s}" / "summary.json").read_text()) for s in (0, 1)]
    for cond in ("d2l", "no_context", "cd"):
        stat = mod.pooled(sets["facts"], cond, "nll")
        seeds = [s[f"eval_{cond}_answer_loss"] for s in summaries]
        assert stat["seeds"] == pytest.approx(seeds, rel=1e-9) and stat["mean"] == pytest.approx(sum(seeds) / 2)
        assert stat["ci"][0] <= stat["mean"] <= stat["ci"][1]
    # the same folder compacted into the CSVs reads back as the same runs (floats to 6 significant digits)
    mod.collect([f"tiny={res}"], tmp_path / "csv")
    back = mod.group_sets(mod.read_tables(tmp_path / "csv"), "tiny")
    assert list(back) == ["facts", "x2"] and sorted(back["facts"]) == [0, 1]
    for cond in ("d2l", "no_context", "cd"):
        raw, compact = mod.pooled(sets["facts"], cond, "nll"), mod.pooled(back["facts"], cond, "nll")
        assert compact["seeds"] == pytest.approx(raw["seeds"], rel=1e-5)
    for cond in ("d2l", "in_context_truncated"):
        assert mod.pooled(back["x2"], cond, "correct") == mod.pooled(sets["x2"], cond, "correct")


def _eval(questions: list[str], cond: str, correct: list[float]) -> dict:
    rows = [
        {"doc": j, "question": q, "doc_tokens": 20, cond: {"correct": c, "em": 0.0, "f1": c, "nll": 1.0, "tokens": 2}}
        for j, (q, c) in enumerate(zip(questions, correct, strict=True))
    ]
    return {"conditions": [cond], "context_window": 512, "internalize_ms_per_doc": 5.0, "per_question": rows}


def test_pooled_intervals_carry_the_spread_between_seeds(tmp_path):
    """Issue 62: seeds that disagree widen the interval. Two seeds that agree on every question and two that split
    (one right on all 40, one on none) have the same seed-averaged questions and mean 0.5, but only the first pair's
    interval is narrow: averaging the seeds first would have given both the same."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    questions = [f"q{j}" for j in range(40)]
    half = [float(j % 2) for j in range(40)]
    for name, per_seed in (("agree", (half, half)), ("split", ([1.0] * 40, [0.0] * 40))):
        for seed, correct in enumerate(per_seed):
            (tmp_path / name / f"s{seed}").mkdir(parents=True)
            (tmp_path / name / f"s{seed}" / "eval.json").write_text(json.dumps(_eval(questions, "d2l", correct)))
    agree = mod.pooled(mod.load_runs(tmp_path / "agree")["facts"], "d2l", "correct")
    split = mod.pooled(mod.load_runs(tmp_path / "split")["facts"], "d2l", "correct")
    assert agree["mean"] == split["mean"] == 0.5 and split["seeds"] == [1.0, 0.0]
    assert 0.3 < agree["ci"][0] < 0.5 < agree["ci"][1] < 0.7
    assert split["ci"] == [0.0, 1.0]  # a draw of the one seed twice is all the interval holds at its ends


def test_report_adds_a_baseline_run_once_to_every_seed(tmp_path):
    """`--rows cd=<eval.json>`: context distillation, run once on a CPU, paired with each GPU seed of D2L."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    questions = ["q0", "q1", "q2", "q3"]
    for seed, correct in ((0, [1, 1, 0, 0]), (1, [1, 0, 0, 0])):
        (tmp_path / f"s{seed}").mkdir()
        (tmp_path / f"s{seed}" / "eval.json").write_text(json.dumps(_eval(questions, "d2l", correct)))
    cd = tmp_path / "cd.json"
    cd.write_text(json.dumps({**_eval(questions, "cd", [1, 1, 1, 0]), "cd_ms_per_doc": 3000.0, "cd_docs": 4}))
    sets = mod.load_runs(tmp_path)
    mod.rows_option(sets, f"cd={cd}")
    diff = mod.pooled(sets["facts"], "d2l", "correct", minus="cd")
    assert diff["seeds"] == [-0.25, -0.5] and diff["mean"] == pytest.approx(-0.375)
    assert sets["facts"][1]["eval"]["cd_ms_per_doc"] == 3000.0
    cd.write_text(json.dumps(_eval(["other", *questions[1:]], "cd", [1, 1, 1, 0])))
    with pytest.raises(ValueError, match="other questions"):
        mod.add_rows(mod.load_runs(tmp_path), ["cd"], cd)
    with pytest.raises(SystemExit, match="no set x2"):
        mod.rows_option(sets, f"x2:cd={cd}")


def test_plot_gaps_reads_each_monitor_step_and_names_a_run_without_one(tmp_path, capsys):
    mod = experiment_script(SCRIPT.parent / "plot_gaps.py")
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 200, "eval_heldout_loss": 1.0}, {"step": 200, "eval_heldout_gap": 0.25, "eval_train_gap": 0.5}]
    rows.append({"step": 400, "eval_heldout_gap": 0.375, "eval_train_gap": 0.625})
    (run / "eval_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert mod.gap_series(run) == [(200, 0.25), (400, 0.375)]  # HF's per-dataset lines carry no gap
    assert mod.gap_series(run, "eval_train_gap") == [(200, 0.5), (400, 0.625)]
    assert mod.run_spec(f"stage 2b={run}@1000") == ("stage 2b", run, 1000)  # a warm start drawn from step 1,000
    assert mod.run_spec("a=/x/y@z") == ("a", Path("/x/y@z"), 0)
    with pytest.raises(SystemExit, match="expected LABEL=RUN_DIR"):
        mod.run_spec(str(run))
    mod.main([f"a run={run}", f"continued={run}@400", "--out", str(tmp_path / "gaps.png")])
    assert (tmp_path / "gaps.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "none").mkdir()
    with pytest.raises(SystemExit, match="none: no eval_heldout_gap"):
        mod.gap_series(tmp_path / "none")


def test_train_windows_averages_the_rows_logged_in_each_window(tmp_path, capsys):
    mod = experiment_script(SCRIPT.parent / "train_windows.py")
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"step": 1, "ce_loss": 4.0},
        {"step": 5, "ce_loss": 2.0, "locality_loss": 1.0},
        {"step": 10, "ce_loss": 1.0},
    ]
    rows += [{"step": 10, "eval_heldout_gap": 0.5}, {"step": 15, "ce_loss": 0.5, "locality_loss": 0.25}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert mod.window_means(run, "ce_loss", 20, 10) == [7.0 / 3, 0.5]  # (0, 10] holds steps 1, 5 and 10
    assert mod.window_means(run, "locality_loss", 30, 10) == [1.0, 0.25, None]
    mod.main([f"a={run}", "--steps", "15", "--window", "10", "--keys", "ce_loss,locality_loss"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| steps | ce_loss, a | locality_loss, a |"
    assert out[2:] == ["| 1-10 | 2.333 | 1.000 |", "| 11-15 | 0.500 | 0.250 |"]
    with pytest.raises(SystemExit, match=r"no metrics\.jsonl"):
        mod.window_means(tmp_path, "ce_loss", 10, 10)
    with pytest.raises(SystemExit, match="expected LABEL=RUN_DIR"):
        mod.main([str(run), "--steps", "10"])


def test_report_entity_table_shows_the_binding_margins(tmp_path):
    """The same LoRA on its own question and on another entity's: accuracy, own fact, and the value margins."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    ev = _eval(["q0", "q1", "q2"], "d2l", [1, 0, 0])
    for row, carry, stray in zip(ev["per_question"], (3.0, 1.0, -1.0), (2.0, -0.5, None), strict=True):
        row["d2l"].update(lora_value_margin=carry, lora_value_preferred=float(carry > 0))
        if stray is not None:
            row["d2l_other_entity"] = {"correct": 0.0, "own_fact": float(stray > 0), "lora_value_margin": stray,
                                       "lora_value_preferred": float(stray > 0), "nll": 3.0, "tokens": 2}  # fmt: skip
    (tmp_path / "s0").mkdir()
    (tmp_path / "s0" / "eval.json").write_text(json.dumps(ev))
    table = mod.entity_table(mod.load_runs(tmp_path)["facts"])
    assert len(table) == 5  # D2L's block only: no in-context control in this run
    own, other, bound = (line.split(" | ") for line in table[2:])
    assert own[0] == "| D2L: about the document's entity"
    assert own[1].startswith("0.333 [") and own[3].startswith("+1.000 [") and own[4].startswith("0.667 [")
    assert other[1].startswith("0.000 [") and other[2].startswith("0.500 [") and other[3].startswith("+0.750 [")
    assert other[4].startswith("0.500 [")
    assert bound[3].startswith("+1.250 [")  # paired over q0 and q1: ((3 - 2) + (1 + 0.5)) / 2
    for row, carry, stray in zip(ev["per_question"], (4.0, 2.0, 0.5), (0.0, 1.0, -3.0), strict=True):
        margins = {"lora_value_margin": carry, "lora_value_preferred": float(carry > 0)}
        row["in_context"] = {"correct": 1.0, "nll": 1.0, "tokens": 2, **margins}
        margins = {"lora_value_margin": stray, "lora_value_preferred": float(stray > 0)}
        row["in_context_other_entity"] = {"correct": 1.0, "own_fact": 0.0, "nll": 2.0, "tokens": 2, **margins}
    (tmp_path / "s0" / "eval.json").write_text(json.dumps(ev))
    table = mod.entity_table(mod.load_runs(tmp_path)["facts"])
    assert len(table) == 8 and table[2:5] == [line for line in table[2:5] if line.startswith("| D2L: ")]
    ic_own, ic_other, ic_bound = (line.split(" | ") for line in table[5:])
    assert ic_own[0] == "| in context: about the document's entity" and ic_own[3].startswith("+2.167 [")
    assert (
        ic_other[1].startswith("1.000 [") and ic_other[2].startswith("0.000 [") and ic_other[3].startswith("-0.667 [")
    )
    assert ic_bound[3].startswith("+2.833 [")  # paired over all three: (4 + 1 + 3.5) / 3
    assert mod.entity_table({0: {"eval": _eval(["q0"], "d2l", [1])}})[0].startswith("(not evaluated")


def test_report_splits_d2l_by_the_kind_of_fact_asked(tmp_path):
    """Which facts a LoRA carries: each kind's D2L accuracy pools the seeds over that kind's questions only."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    questions, kinds = ["q0", "q1", "q2", "q3"], ["papers", "papers", "mentor", "mentor"]
    for seed, correct in ((0, [1, 1, 0, 0]), (1, [1, 0, 1, 0])):
        ev = _eval(questions, "d2l", correct)
        for row, kind, c in zip(ev["per_question"], kinds, correct, strict=True):
            row.update(kind=kind, d2l_other_doc={"correct": 0.0, "f1": 0.0, "nll": 6.0, "tokens": 2})
            row["d2l"]["nll"] = 2.0 * (1 + c)
        (tmp_path / f"s{seed}").mkdir()
        (tmp_path / f"s{seed}" / "eval.json").write_text(json.dumps(ev))
    lines = mod.kind_table(mod.load_runs(tmp_path)["facts"])
    mentor, papers = lines[2].split(" | "), lines[3].split(" | ")
    assert mentor[:4] == ["| mentor", "2", "-", "-"] and papers[:4] == ["| papers", "2", "-", "-"]  # no IC, no CD
    assert papers[4].startswith("0.750 [") and "(seeds 1.000, 0.500)" in papers[4]
    assert mentor[4].startswith("0.250 [") and "(seeds 0.000, 0.500)" in mentor[4]
    # answer CE: each question's NLL over its 2 tokens, seed-averaged: papers (8/2 + 6/2) / 2 = 1.75
    assert papers[6:] == ["1.750", "3.000 |"] and mentor[6:] == ["1.250", "3.000 |"]
    # a baseline run once (context distillation on three of the questions), given to both seeds as report --rows does
    cd = _eval(questions, "cd", [1, 0, 1, 1])
    for row, kind in zip(cd["per_question"], kinds, strict=True):
        row["kind"] = kind
    cd["per_question"][3].pop("cd")  # the fourth question's document was not distilled (cd_max_docs)
    (tmp_path / "cd.json").write_text(json.dumps(cd))
    sets = mod.load_runs(tmp_path)
    mod.add_rows(sets, ["cd"], tmp_path / "cd.json")
    mentor, papers = (line.split(" | ") for line in mod.kind_table(sets["facts"])[2:])
    assert papers[3] == "0.500" and mentor[1:4] == ["2", "-", "1.000"] and mentor[4].startswith("0.250 [")
    # kinds are split with no D2L condition too (a baseline-only run)
    only_cd = mod.kind_table({0: {"eval": cd}})
    assert [line.split(" | ")[:4] for line in only_cd[2:]] == [
        ["| mentor", "2", "-", "1.000"],
        ["| papers", "2", "-", "0.500"],
    ]
    assert mod.kind_table({0: {"eval": _eval(questions, "d2l", [1, 0, 0, 0])}}) == ["(the questions carry no kind)"]


def test_report_pairs_d2l_with_truncation_at_each_length_beyond_the_facts(tmp_path):
    """The long sets get D2L minus truncated in context (and CD, full in context) per length, paired by question."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    questions = ["q0", "q1", "q2", "q3"]
    for name, correct in (("s0", [1, 1, 1, 0]), ("s0_x2", [1, 1, 0, 0]), ("s1_x2", [1, 0, 0, 0])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps(_eval(questions, "d2l", correct)))
    truncated = tmp_path / "truncated.json"
    truncated.write_text(json.dumps(_eval(questions, "in_context_truncated", [0, 1, 0, 0])))
    sets = mod.load_runs(tmp_path)
    assert mod.long_paired_table({"facts": sets["facts"]}) == []  # nothing beyond the facts alone
    mod.rows_option(sets, f"x2:in_context_truncated={truncated}")
    rows = mod.long_paired_table(sets)
    assert len(rows) == 3 and rows[2].startswith("| x2 | in context (truncated to the window) | 4 (4) | +0.125 [")
    assert "(seeds +0.250, +0.000)" in rows[2]  # seed 0: 2 right against 1, seed 1: 1 against 1, of 4
    assert "### Paired differences beyond the facts alone" in mod.report(sets)


def test_report_splits_each_length_by_where_the_evidence_lies(tmp_path):
    """Inside the granted window or beyond it (eval.json's `in_window`): truncation reads only the inside."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    questions = ["q0", "q1", "q2", "q3"]
    for name, correct in (("s0", [1, 1, 1, 0]), ("s0_x2", [1, 0, 1, 1]), ("s1_x2", [0, 0, 1, 0])):
        ev = _eval(questions, "d2l", correct)
        for row, inside in zip(ev["per_question"], (True, True, False, False), strict=True):
            row["in_window"] = inside or name == "s0"  # the facts alone lie inside the window
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps(ev))
    truncated = tmp_path / "truncated.json"
    truncated.write_text(json.dumps(_eval(questions, "in_context_truncated", [1, 1, 0, 0])))
    sets = mod.load_runs(tmp_path)
    mod.rows_option(sets, f"x2:in_context_truncated={truncated}")
    rows = mod.window_table(sets)
    assert rows[0] == "| condition | x2: inside the window (2 documents) | x2: outside (2 documents) |"
    truncation = next(r for r in rows if r.startswith("| in context (truncated"))
    assert "| 1.000 [1.000, 1.000]" in truncation and truncation.endswith(
        "| 0.000 [0.000, 0.000] (seeds 0.000, 0.000) |"
    )
    d2l = next(r for r in rows if r.startswith("| D2L (own document)"))
    assert "| 0.250 [" in d2l and "(seeds 0.500, 0.000)" in d2l  # inside: seed 0 one of two, seed 1 none
    assert "| 0.750 [" in d2l and "(seeds 1.000, 0.500)" in d2l  # outside: seed 0 both, seed 1 one of two
    assert mod.window_table({"facts": sets["facts"]}) == []
    assert "### Where the evidence lies" in mod.report(sets)


def test_report_docs_keeps_some_documents_and_report_md_starts_with_its_command(tmp_path):
    """`--docs N`: every condition on the questions of the first N documents, where a baseline ran on those only;
    `--docs A:B` documents A to B-1 (documents added later, alone), with `--out` beside the first report; each
    report.md starts with the command that wrote it and its `--note`."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    (tmp_path / "s0").mkdir()
    ev = _eval(["q0", "q1", "q2", "q3"], "d2l", [1, 0, 0, 0])
    ev["per_question"][1]["doc"] = 0  # two questions about document 0, then documents 2 and 3
    (tmp_path / "s0" / "eval.json").write_text(json.dumps(ev))
    sets = mod.some_docs(mod.load_runs(tmp_path), mod.doc_range("1"))
    assert [r["question"] for r in sets["facts"][0]["eval"]["per_question"]] == ["q0", "q1"]
    assert mod.pooled(sets["facts"], "d2l", "correct")["mean"] == 0.5
    mod.main(["--results", str(tmp_path), "--docs", "2"])
    assert "| D2L (own document) | 3 (2) | 0.333 [" in (tmp_path / "report.md").read_text()
    later = mod.some_docs(mod.load_runs(tmp_path), mod.doc_range("1:3"))  # the second and third documents alone
    assert [r["question"] for r in later["facts"][0]["eval"]["per_question"]] == ["q2", "q3"]
    mod.main(["--results", str(tmp_path), "--docs", "2:3", "--note", "from a GPU", "--out", str(tmp_path / "last")])
    last = (tmp_path / "last" / "report.md").read_text()
    assert "| D2L (own document) | 1 (1) | 0.000 [" in last
    command = f"python experiments/d2l_smollm2/report.py --results {tmp_path} --docs 2:3 --out {tmp_path / 'last'}"
    assert last.splitlines()[:2] == [f"<!-- {command} (from a GPU) -->", ""]  # the command that wrote it, and why
    assert "| 3 (2) |" in (tmp_path / "report.md").read_text()  # --out left the first report alone
    for bad in ("3:1", "x", "1:"):
        with pytest.raises(argparse.ArgumentTypeError):
            mod.doc_range(bad)


def test_evidence_only_reads_each_answer_sentence_alone_and_pairs_it_with_the_whole_document():
    """evidence_only.py: a question's document becomes the sentence that states its answer; the two readings are
    paired question by question over the seeds, by kind of answer."""
    from posttrain.data.d2l.facts import fact_qa

    mod = experiment_script(SCRIPT.parent / "evidence_only.py")
    records = fact_qa(2, seed=0, held_out=True, reply="sentence", num_facts=3, single_hop=3, two_hop=0)
    cut = mod.sentence_records(records)
    assert [r["document"] for r in cut] == [r["reply"] for r in records]
    assert all(r["answer"] in r["document"] and "answer_start" not in r for r in cut)
    assert len({r["document"] for r in cut}) == 6 and len({r["document"] for r in records}) == 2
    with pytest.raises(ValueError, match="one-fact questions"):
        mod.sentence_records(fact_qa(1, seed=0, held_out=True, reply="sentence", two_hop=1))
    questions, kinds = ["q0", "q1", "q2", "q3"], ["papers", "papers", "mentor", "mentor"]
    whole, sentence = {}, {}
    for seed, (w, s) in enumerate((([1, 0, 0, 0], [1, 1, 0, 1]), ([0, 0, 0, 0], [1, 0, 0, 0]))):
        whole[seed], sentence[seed] = _eval(questions, "d2l", w), _eval(questions, "d2l", s)
        for row, kind in zip(whole[seed]["per_question"], kinds, strict=True):
            row.update(kind=kind, doc=0 if kind == "papers" else 1)
    lines = mod.table(mod.paired_runs(whole, sentence))
    every, mentor, papers = (line.split(" | ") for line in lines[2:])
    assert every[0] == "| all (4 in 2 documents)" and every[1].startswith("0.125 [") and every[2].startswith("0.500 [")
    assert every[3].startswith("+0.375 [") and "(seeds +0.500, +0.250)" in every[3]
    assert papers[0] == "| papers (2)" and papers[3].startswith("+0.500 [") and mentor[3].startswith("+0.250 [")
    sentence[1]["per_question"][0]["question"] = "other"
    with pytest.raises(ValueError, match="seed 1: the sentence run asked other questions"):
        mod.paired_runs(whole, sentence)


def _raw_run_folder(folder: Path, rows: list[dict], extra: dict | None = None, eval_doc_tokens: int = 0) -> None:
    """One run folder as train.py and run.sh leave it: eval.json (per-question rows with responses), summary.json,
    config.yaml, time_v.txt, loadavg.txt."""
    folder.mkdir(parents=True)
    conds = list(dict.fromkeys(c for r in rows for c, v in r.items() if isinstance(v, dict)))
    ev = {"num_docs": len({r["doc"] for r in rows}), "num_questions": len(rows), "context_window": 512}
    ev.update(conditions=conds, internalize_ms_per_doc=12.345678901, per_question=rows, **(extra or {}))
    (folder / "eval.json").write_text(json.dumps(ev, indent=2))
    (folder / "summary.json").write_text(json.dumps({"algo": "d2l", "runtime_s": 61.07, "final_step": 64}))
    params = f"    eval_doc_tokens: {eval_doc_tokens}\n" if eval_doc_tokens else ""
    (folder / "config.yaml").write_text(f"seed: 0\ndata:\n  num_eval: 2\n  params:\n    num_facts: 1\n{params}")
    (folder / "time_v.txt").write_text(
        "\tUser time (seconds): 101.50\n\tSystem time (seconds): 3.25\n"
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\n\tMaximum resident set size (kbytes): 2712345\n"
    )
    (folder / "loadavg.txt").write_text("12:00:00 1.50 1.00 0.75\n12:00:10 2.25 1.00 0.75\n")


def _rows(seed: int, tokens: int, conds: dict[str, list[float]]) -> list[dict]:
    """Four questions about two documents; each condition's `correct` per question, the other metrics made up (and
    exact at 6 significant digits, so that the CSV's rounding moves nothing here)."""
    kinds = ["papers", "mentor", "papers", "birth_date"]
    rows = []
    for j in range(4):
        row = {"doc": j // 2, "other_doc": 1 - j // 2, "question": f"How many papers has P{j} published?",
               "answer": str(j), "answers": [str(j)], "kind": kinds[j], "hops": 1, "doc_tokens": tokens + j,
               "in_window": tokens < 512 or j % 2 == 0}  # fmt: skip
        for cond, correct in conds.items():
            row[cond] = {"nll": 1.5 + 0.25 * j + 0.125 * seed, "tokens": 8 + j, "response": "P has 3 papers.",
                         "correct": correct[j], "em": 0.0, "f1": correct[j] * 0.5 + 0.25}  # fmt: skip
            if cond == "d2l_other_entity":
                row[cond].update(own_fact=float(j % 2), lora_value_margin=2.5 - j, lora_value_preferred=float(j < 2))
            if cond == "d2l":
                row[cond].update(lora_value_margin=3.5 - j * 0.5, lora_value_preferred=1.0)
        rows.append(row)
    return rows


def _raw_results(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A run group (seeds 0 and 1, the facts alone and 2x the window) and two baselines run once, in the real files'
    format: context distillation on the facts alone and truncated in context at 2x (its config says so)."""
    group = tmp_path / "raw" / "fact1_chunks_cpu"
    for seed in (0, 1):
        own = [1.0, 0.0, 1.0, seed * 1.0]
        facts = {"no_context": [0, 0, 0, 0], "d2l": own, "d2l_other_doc": [0, 0, 0, 0], "d2l_other_entity": [0] * 4}
        _raw_run_folder(group / f"s{seed}", _rows(seed, 20, facts))
        long = {"d2l": own[::-1], "d2l_other_doc": [0, 0, 0, 0], "d2l_other_entity": [0, 0, 0, 0]}
        _raw_run_folder(group / f"s{seed}_x2", _rows(seed, 1000, long), eval_doc_tokens=1024)
    cd = tmp_path / "raw" / "cd_48docs"
    cd_rows = _rows(0, 20, {"cd": [1, 1, 0, 1]})
    for row in cd_rows[2:]:  # the second document was not distilled (algo.baselines.cd_max_docs=1)
        del row["cd"]
    _raw_run_folder(cd, cd_rows, {"cd_ms_per_doc": 30877.25, "cd_docs": 1})
    cut = tmp_path / "raw" / "x2_48docs"
    _raw_run_folder(cut, _rows(0, 1000, {"in_context_truncated": [1, 0, 0, 0]}), eval_doc_tokens=1024)
    return group, cd, cut


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def test_collect_compacts_raw_run_folders_into_the_csvs_that_report_the_same_tables(tmp_path):
    """--collect NAME=DIR: a run group and its baselines into runs.csv, fit.csv and long.csv; read back, they give
    report.py's tables of the raw folders to the character (--rows pairing a baseline named by its source)."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    group, cd, cut = _raw_results(tmp_path)
    out = tmp_path / "csv"
    paths = mod.collect([f"chunks={group}", f"cd={cd}", f"cut={cut}"], out)
    assert (
        sorted(p.name for p in out.iterdir())
        == ["fit.csv", "long.csv", "runs.csv"]
        == sorted(p.name for p in paths.values())
    )
    runs = _csv(out / "runs.csv")
    assert [(r["source"], r["run"], r["set"]) for r in runs] == [
        ("chunks", "s0", "facts"), ("chunks", "s1", "facts"), ("chunks", "s0_x2", "x2"), ("chunks", "s1_x2", "x2"),
        ("cd", "-", "facts"), ("cut", "-", "x2"),
    ]  # fmt: skip
    first = runs[0]
    assert first["internalize_ms_per_doc"] == "12.345678901" and first["cpu_s"] == "104.75" and first["commit"] == ""
    assert (first["wall"], first["rss_gb"], first["load_max"]) == ("1:02.50", "2.712345", "2.25")
    assert first["final_step"] == "64" and first["runtime_s"] == "61.07"
    assert len({r["questions"] for r in runs}) == 1  # every run asked the same questions
    fit, long = _csv(out / "fit.csv"), _csv(out / "long.csv")
    assert len(fit) == 2 * 4 * 4 + 4 and {r["condition"] for r in fit} >= {"d2l_other_entity", "cd"}
    assert "em" not in long[0] and {r["condition"] for r in long} == {"d2l", "d2l_other_doc", "in_context_truncated"}
    assert fit[0] == {
        "source": "chunks", "run": "s0", "item": "0", "doc": "0", "kind": "papers", "hops": "1", "doc_tokens": "20",
        "in_window": "1", "condition": "no_context", "correct": "0", "em": "0", "f1": "0.25", "nll": "1.5",
        "tokens": "8", "own_fact": "", "lora_value_margin": "", "lora_value_preferred": "",
    }  # fmt: skip
    # the questions CD did not score keep one row each, with no metrics: the baseline still pairs question by question
    cd_rows = [(r["item"], r["condition"], r["correct"]) for r in fit if r["source"] == "cd"]
    assert cd_rows == [("0", "cd", "1"), ("1", "cd", "1"), ("2", "-", ""), ("3", "-", "")]
    tables = mod.read_tables(out)
    compact, base = mod.group_sets(tables, "chunks"), mod.baselines(tables)
    raw = mod.load_runs(group)
    mod.rows_option(compact, "facts:cd=cd", base)
    mod.rows_option(compact, "x2:in_context_truncated=cut", base)
    mod.rows_option(raw, f"facts:cd={cd / 'eval.json'}")
    mod.rows_option(raw, f"x2:in_context_truncated={cut / 'eval.json'}")
    text = mod.report(compact)
    assert text == mod.report(raw)
    assert "| context distillation (per document) | 2 (1) | 1.000 [" in text  # the distilled document's two questions
    assert "| D2L: binding, own question minus the other entity's (paired) |" in text and "| s1_x2 | 12 |" in text
    # a source collected again replaces its rows; the others stay
    again = mod.collect([f"cut={cut}"], out)
    assert [r["source"] for r in _csv(again["runs"])] == [r["source"] for r in runs[:5]] + ["cut"]
    # a baseline on other questions is refused, as from its eval.json
    ev = json.loads((cut / "eval.json").read_text())
    ev["per_question"][0]["question"] = "Who founded Q?"
    (cut / "eval.json").write_text(json.dumps(ev))
    mod.collect([f"cut={cut}"], out)
    with pytest.raises(ValueError, match="other questions"):
        mod.rows_option(mod.group_sets(mod.read_tables(out), "chunks"), "x2:in_context_truncated=cut",
                        mod.baselines(mod.read_tables(out)))  # fmt: skip
    with pytest.raises(SystemExit, match="expected NAME=DIR"):
        mod.collect([str(group)], out)
    with pytest.raises(SystemExit, match="no such folder"):
        mod.collect([], out, results=tmp_path / "nothing")


def test_the_committed_csvs_give_the_committed_report_byte_for_byte(tmp_path):
    """A fresh clone has only the tracked files: report.py on results/*.csv writes results/report.md as committed, and
    its plots; each CSV stays small."""
    mod = experiment_script(SCRIPT.parent / "report.py")
    mod.main(["--out", str(tmp_path)])
    assert (tmp_path / "report.md").read_bytes() == (RESULTS / "report.md").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.md", *mod.PLOTS])
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in mod.PLOTS)
    assert all(path.stat().st_size < 300_000 for path in RESULTS.glob("*.csv"))
    with pytest.raises(SystemExit):
        mod.main(["--rows", "cd=x.json"])  # --rows belongs to --results


def test_every_figure_of_the_readme_is_in_the_report():
    """README.md's status table is results/report.md's, and each of its figures (decimals, percentages, ratios) stands
    in the report as written there."""
    readme = (SCRIPT.parent / "README.md").read_text()
    report = (RESULTS / "report.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| ")]
    assert table and all(line in report.splitlines() for line in table)
    prose = "\n".join(line for line in readme.splitlines() if not line.startswith("    "))
    figures = set(re.findall(r"[+-]?\d+\.\d+|\d+%|\d+(?:-\d+)?x\b", prose))
    assert figures and not sorted(f for f in figures if f not in report)
    intervals = set(re.findall(r"[+-]?\d+\.\d+ \[[+-]?\d+\.\d+, [+-]?\d+\.\d+\]", prose))  # each one whole
    assert intervals and not sorted(i for i in intervals if i not in report)
    assert len(readme.encode()) < 10_500 and len((SCRIPT.parent / "LOG.md").read_bytes()) < 8_000
