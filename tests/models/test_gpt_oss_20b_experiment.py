"""experiments/gpt_oss_20b: the worker measures a run against its plan (here on the tiny native MXFP4 GPT-OSS, in this
process), the CSV keeps every row when columns change, and report.py flags a peak off its plan."""

from __future__ import annotations

import csv
import json

from tests.conftest import ROOT, experiment_script

HERE = ROOT / "experiments" / "gpt_oss_20b"
TINY_ARM = (
    "model=tiny_gpt_oss",
    "model.quantization=mxfp4",
    "model.mxfp4=native",
    "hw=cpu",
    "algo=grpo",
    "trainer.max_steps=2",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=2",
    "algo.trl.max_completion_length=8",
    "algo.generation.backend=static_policy",
    "trainer.progress_bar=false",
)


def test_worker_times_phases_and_compares_peak_rss_with_the_plan(tmp_path):
    run = experiment_script(HERE / "run.py")
    run.ARMS["tiny"] = TINY_ARM
    row = run.worker("tiny", [])
    assert row["steps"] == 2 and row["step_s"] > 0 and row["generation_s"] > 0 and row["loss_backward_s"] > 0
    assert row["generation_s"] + row["scoring_s"] + row["loss_backward_s"] <= row["step_s"] + 0.015
    assert 0 < row["plan_peak_gib"] < 2 and row["peak_rss_gib"] >= row["rss_train_gib"] > 0
    assert abs(row["rss_over_plan"] - row["peak_rss_gib"] / row["plan_peak_gib"]) < 0.01  # from unrounded GiB
    assert set(json.loads(row["plan_phases_gib"])) == {"train", "score", "generate", "step"}
    out = tmp_path / "runs.csv"
    with out.open("w", newline="") as f:  # a file from an earlier version, with fewer columns
        writer = csv.DictWriter(f, fieldnames=["arm", "steps"])
        writer.writeheader()
        writer.writerow({"arm": "old", "steps": 1})
    run.append_row(out, row)
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["arm"] for r in rows] == ["old", "tiny"] and list(rows[0]) == list(run.FIELDS)
    report = experiment_script(HERE / "report.py")
    rows[1]["rss_over_plan"] = "1.2"  # off by 20%
    assert "| tiny | 2 |" in report.tables(report.newest(rows[1:]))
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=run.FIELDS)
        writer.writeheader()
        writer.writerow(rows[1])
    assert report.main(["--csv", str(out), "--out", str(tmp_path / "r.md")]) == 1
    assert report.main(["--csv", str(out), "--out", str(tmp_path / "r.md"), "--tolerance", "0.25"]) == 0


def test_committed_report_regenerates_from_the_csv(tmp_path):
    report = experiment_script(HERE / "report.py")
    assert report.main(["--out", str(tmp_path / "report.md")]) == 0  # every arm within 15% of its plan
    assert (tmp_path / "report.md").read_text() == (HERE / "results" / "report.md").read_text()
    readme = (HERE / "README.md").read_text()
    for line in (tmp_path / "report.md").read_text().splitlines()[1:]:
        assert line in readme  # the README's tables are the report's, line for line
