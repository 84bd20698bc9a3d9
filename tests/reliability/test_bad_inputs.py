"""Bad inputs: every case of experiments/reliability/cases.py fails with exactly one `error:` line naming the problem,
a non-zero exit, and no file already on disk changed (the reference checkpoint, the previous run's files...).

The cases run in this interpreter (one import of torch/transformers for all of them); a few also run as real
`python train.py` subprocesses, and the committed results (results/cases.csv, report.md, the README's table) are
checked against the case list.
"""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch

from experiments.reliability import cases
from tests.reliability.helpers import ROOT

# cases that build a model and train a step or two before failing (seconds each, not milliseconds)
TRAINING = {
    "nan_loss",
    "grpo_diverged",
    "reward_raises",
    "reward_wrong_length",
    "prompt_too_long",
    "no_generation_tags",
}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("cases")
    cases.make_good_checkpoint(work, inprocess=True)
    yield work
    torch.set_num_threads(before)


def test_there_are_at_least_25_distinct_cases():
    ids = [c.id for c in cases.CASES]
    assert len(ids) >= 25 and len(set(ids)) == len(ids)
    assert len({c.problem for c in cases.CASES}) == len(ids)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c.id in TRAINING else c for c in cases.CASES],
    ids=[c.id for c in cases.CASES],
)
def test_case_fails_in_one_line_and_overwrites_nothing(case, work):
    result = cases.run_case(case, work, inprocess=True)
    assert result.rc == 2, (result.rc, result.stderr[-3000:])  # UserError exit code, never a crash (1)
    assert not result.problems(), (result.problems(), result.stderr[-3000:])
    assert "Error executing job" not in result.stderr and "Traceback" not in result.stderr


def test_a_bug_still_shows_its_traceback(work, monkeypatch):
    """Only UserErrors are shortened: a genuine bug keeps Python's traceback and a non-zero exit."""
    import posttrain.run

    def broken(name):
        raise ZeroDivisionError("deliberate bug")

    monkeypatch.setattr(posttrain.run, "get_algorithm", broken)
    rc, _, err = cases.run_cli_inprocess([*cases.FAST, f"hydra.run.dir={work}/bug/run"])
    assert rc != 0 and rc != 2
    assert "Traceback" in err and "ZeroDivisionError: deliberate bug" in err
    assert not any(line.startswith("error:") for line in err.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize(
    "case_id", ["unknown_group_choice", "missing_dataset", "not_utf8", "run_dir_not_creatable", "reward_raises"]
)
def test_real_subprocess_stderr_is_exactly_one_line(case_id, work):
    """In a fresh `python train.py` every library warning and logger reaches stderr: still one line."""
    case = next(c for c in cases.CASES if c.id == case_id)
    result = cases.run_case(case, work, inprocess=False)
    assert not result.problems(), (result.problems(), result.stderr[-3000:])
    assert result.rc == 2


def test_results_table_covers_every_case():
    """results/cases.csv has one row per case, in the case list's order, and report.md's full table shows each with
    its `error:` line and "yes"; the README holds report.md's before/after table of issue 60."""
    folder = ROOT / "experiments" / "reliability"
    with (folder / "results" / "cases.csv").open(newline="") as f:
        records = list(csv.DictReader(f))
    assert [r["id"] for r in records] == [c.id for c in cases.CASES]
    assert [r["problem"] for r in records] == [c.problem for c in cases.CASES]
    text = (folder / "results" / "report.md").read_text()
    full = text.split("## Every case")[1]
    rows = [ln for ln in full.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert len(rows) == len(cases.CASES) >= 25
    for i, (case, rec, row) in enumerate(zip(cases.CASES, records, rows), 1):
        assert row.startswith(f"| {i} | {case.problem} | `{cases._display_args(case)}` |"), row  # as run now
        assert "| yes |" in row and "error: " in row, row
        assert json.loads(rec["problems"]) == [] and int(rec["exit"]) == 2, rec
    assert all(f"| {i} | {c.problem} | 2 | yes |" in text for i, c in enumerate(cases.CASES, 1))  # the short table
    # issue 60's before/after: the README's table, every case the issue names counted once under its old outcome
    readme = (folder / "README.md").read_text()
    after = text.split("## Issue 60: before and after")[1].split("## Every case")[0]
    rows = [ln for ln in after.splitlines() if ln.startswith("| ") and not ln.startswith("| at ")]
    assert rows and all(row in readme for row in rows)
    named = [c for c in cases.CASES if c.before]
    assert sum(int(row.split(" | ")[2].split()[0]) for row in rows) == len(named) >= 10
    assert all(row.endswith(f"| {n} of {n} |") for row in rows for n in [row.split(" | ")[2].split()[0]])
