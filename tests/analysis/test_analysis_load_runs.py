"""`posttrain.analysis.load_runs`: overrides as typed columns, one row per logged step, single run or multirun."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from posttrain.analysis import find_runs, load_optuna, load_runs, load_summaries, parse_override
from tests.analysis.conftest import MAX_STEPS


def _fake_run(path: Path, overrides: list[str], rewards: list[float] | None, summary: dict | None = None) -> Path:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if rewards is not None:
        lines = [json.dumps({"step": i + 1, "reward": r, "loss": -r}) for i, r in enumerate(rewards)]
        (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (path / "summary.json").write_text(json.dumps(summary or {"objective": rewards[-1] if rewards else None}))
    ckpt = path / "checkpoints" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "summary.json").write_text("{}")  # must not count as a run
    return path


def test_parse_override_types_and_skips():
    assert parse_override("algo.trl.beta=0.04") == ("algo.trl.beta", 0.04)
    assert parse_override("seed=2") == ("seed", 2)
    assert parse_override("model=tiny_llama") == ("model", "tiny_llama")
    assert parse_override("+trainer.extra=true") == ("trainer.extra", True)
    assert parse_override("resume=null") == ("resume", None)
    assert parse_override("hydra.run.dir=/x") is None
    assert parse_override("hydra/launcher=local") is None
    assert parse_override("~logger") is None


def test_load_runs_on_a_fake_multirun(tmp_path):
    _fake_run(tmp_path / "0_a", ["algo.trl.beta=0.0", "seed=1", "model=tiny_llama"], [0.1, 0.2])
    _fake_run(tmp_path / "1_b", ["algo.trl.beta=0.04", "seed=1", "model=tiny_llama"], [0.3, 0.5, 0.7])
    _fake_run(tmp_path / "2_c", ["algo.trl.beta=0.04", "seed=2", "model=tiny_llama"], None)  # died before step 1
    (tmp_path / "multirun.yaml").write_text("{}")

    assert [p.name for p in find_runs(tmp_path)] == ["0_a", "1_b", "2_c"]
    df = load_runs(tmp_path)
    assert df.groupby("run").size().to_dict() == {"0_a": 2, "1_b": 3, "2_c": 1}
    assert df.attrs["swept"] == ["algo.trl.beta", "seed"]  # model is the same everywhere
    assert df["algo.trl.beta"].dtype.kind == "f" and df["seed"].dtype.kind == "i"
    b = df[df["run"] == "1_b"]
    assert b["reward"].tolist() == [0.3, 0.5, 0.7] and b["step"].tolist() == [1, 2, 3]
    assert math.isnan(df[df["run"] == "2_c"]["step"].iloc[0])
    assert load_runs(tmp_path, metrics=["reward"]).columns.tolist()[-2:] == ["step", "reward"]

    s = load_summaries(tmp_path)
    assert s["objective"].tolist()[:2] == [0.2, 0.7] and s["job"].tolist() == [0, 1, 2]

    single = load_runs(tmp_path / "1_b")
    assert single["run"].unique().tolist() == ["1_b"] and single.attrs["swept"] == []


def test_config_columns_for_runs_started_separately(tmp_path):
    for name, backend in (("a", "trl"), ("b", "fused")):
        run = tmp_path / name
        run.mkdir()
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
        (run / "config.yaml").write_text(yaml.safe_dump({"kernels": {"backend": backend}, "seed": 0}))
    df = load_runs(tmp_path, config=["kernels.backend", "seed", "no.such"])
    assert df.set_index("run")["kernels.backend"].to_dict() == {"a": "trl", "b": "fused"}
    assert df.attrs["swept"] == ["kernels.backend"] and df["no.such"].isna().all()
    assert load_summaries(tmp_path, config=["kernels.backend"])["kernels.backend"].tolist() == ["trl", "fused"]


def test_load_optuna_needs_results(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an Optuna sweep"):
        load_optuna(tmp_path)


@pytest.mark.slow
def test_multirun_2x2_gives_4_runs_with_swept_columns(sweep_2x2):
    run_dirs = [p for p in sweep_2x2.iterdir() if p.is_dir() and (p / "summary.json").is_file()]
    assert len(run_dirs) == 4
    assert not list(sweep_2x2.parent.glob("runs")) and not list(sweep_2x2.parent.glob("outputs"))

    df = load_runs(sweep_2x2)
    assert df["run"].nunique() == 4
    assert set(df.attrs["swept"]) == {"algo.trl.beta", "seed"}
    members = set(df.groupby("run")[["algo.trl.beta", "seed"]].first().itertuples(index=False, name=None))
    assert members == {(0.0, 1), (0.0, 2), (0.04, 1), (0.04, 2)}
    assert (df.groupby("run")["step"].max() == MAX_STEPS).all()
    assert df["reward"].between(0, 1).all()
    # KL is logged only where there is a reference model (beta > 0)
    assert df[df["algo.trl.beta"] == 0.04]["kl"].notna().all()

    s = load_summaries(sweep_2x2)
    for _, row in s.iterrows():  # the objective returned to the sweeper is the mean reward of the last 5 steps
        rewards = df[df["run"] == row["run"]].sort_values("step")["reward"].tolist()
        assert row["objective"] == pytest.approx(sum(rewards[-5:]) / len(rewards[-5:]))
        assert row["world_size"] == 1
