"""D2L's document-dependence monitor (`algo.monitor_steps`): the datasets, the gap, the logs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from posttrain.algos.d2l.monitor import gaps, monitor_datasets, swap_documents
from posttrain.callbacks import JsonlMetricsCallback
from posttrain.config.validate import ConfigError


def _rows(n_docs: int, per_doc: int):
    rows, records = [], []
    for d in range(n_docs):
        for q in range(per_doc):
            rows.append(
                {"ctx_ids": [d] * 3, "ctx_chunks": [[d] * 3], "input_ids": [d, q], "labels": [-100, q], "t_idx": 0}
            )
            records.append({"document": f"doc {d}", "question": f"q{q}"})
    return rows, records


def test_swap_gives_every_question_the_next_documents_context():
    rows, _ = _rows(3, 2)
    index = [0, 0, 1, 1, 2, 2]
    swapped = swap_documents(rows, index)
    assert [r["ctx_ids"][0] for r in swapped] == [1, 1, 2, 2, 0, 0]
    assert [r["ctx_chunks"] for r in swapped] == [[[1] * 3]] * 2 + [[[2] * 3]] * 2 + [[[0] * 3]] * 2
    assert [r["input_ids"] for r in swapped] == [r["input_ids"] for r in rows]  # the questions stay
    assert rows[0]["ctx_ids"] == [0, 0, 0]  # the input is not modified
    with pytest.raises(ValueError, match="at least two documents"):
        swap_documents(rows[:2], [0, 0])


def test_monitor_datasets_take_the_first_documents_without_teacher_fields():
    rows, records = _rows(5, 2)
    sets = monitor_datasets({"heldout": (rows, records)}, n_docs=3)
    assert sorted(sets) == ["heldout", "heldout_other"]
    own, other = sets["heldout"].rows, sets["heldout_other"].rows
    assert len(own) == len(other) == 6
    assert [r["ctx_ids"][0] for r in own] == [0, 0, 1, 1, 2, 2]
    assert [r["ctx_ids"][0] for r in other] == [1, 1, 2, 2, 0, 0]  # cyclic within the 3 documents
    assert all("t_idx" not in r for r in own + other)


def test_gaps_are_other_minus_own_for_complete_splits():
    m = {"eval_heldout_loss": 1.5, "eval_heldout_other_loss": 2.0, "eval_train_loss": 0.5}
    assert gaps(m) == {"eval_heldout_gap": 0.5}  # train has no other-document loss: no gap


def test_monitor_needs_two_documents_per_split(d2l_cfg):
    from posttrain.algos.d2l.config import validate_d2l

    with pytest.raises(ConfigError, match=r"data\.num_train and data\.num_eval >= 2"):
        validate_d2l(d2l_cfg("algo.monitor_steps=5", "data.num_eval=1"))


def test_monitor_ce_is_the_answer_ce_and_zero_gap_before_training(d2l_cfg, tmp_path):
    """Before training the generated LoRA is zero, so own and other document give the base model's answer CE,
    which `answer_nll` computes independently; with a teacher (kl_coef > 0) the monitor still needs none."""
    from posttrain.algos.d2l import api
    from posttrain.algos.d2l.batching import view_batch
    from posttrain.algos.d2l.condition import answer_nll

    cfg = d2l_cfg(
        "algo.kl_coef=0.5",
        "algo.kl_top_k=4",
        "data.num_train=6",
        "data.num_eval=3",
        "algo.monitor_steps=1",
        "algo.monitor_docs=3",
        "algo.eval_batch_size=64",  # one batch: HF's mean over batches is then the token mean
    )
    trainer = api.build_trainer(cfg, tmp_path)
    metrics = trainer.evaluate()
    assert metrics["eval_heldout_gap"] == 0.0 and metrics["eval_train_gap"] == 0.0
    rows = trainer.eval_dataset["heldout"].rows
    sums, counts = answer_nll(trainer.model, view_batch(rows, trainer.model.tokenizer.pad_token_id), None)
    assert metrics["eval_heldout_loss"] == pytest.approx(sum(sums) / sum(counts), rel=1e-5)


def test_training_logs_the_monitor_to_eval_metrics(d2l_cfg, tmp_path):
    from posttrain.algos.d2l import api

    cfg = d2l_cfg(
        "data.num_train=6",
        "data.num_eval=3",
        "algo.monitor_steps=2",
        "algo.monitor_docs=2",
        "trainer.max_steps=4",
        "trainer.lr=1e-2",
    )
    trainer = api.build_trainer(cfg, tmp_path, callbacks=[JsonlMetricsCallback(tmp_path / "metrics.jsonl")])
    trainer.train()
    logs = [json.loads(line) for line in (tmp_path / "eval_metrics.jsonl").read_text().splitlines()]
    summaries = [r for r in logs if "eval_heldout_gap" in r]
    assert [r["step"] for r in summaries] == [2, 4]
    for r in summaries:
        assert r["eval_heldout_gap"] == pytest.approx(r["eval_heldout_other_loss"] - r["eval_heldout_loss"])
        assert r["eval_train_gap"] == pytest.approx(r["eval_train_other_loss"] - r["eval_train_loss"])
    assert summaries[-1]["eval_train_gap"] != 0.0  # a trained hypernet: the document changes the LoRA
    train_logs = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert train_logs and all(not any(k.startswith("eval_") for k in r) for r in train_logs)


def test_a_warm_start_logs_its_monitor_at_step_0(d2l_cfg, d2l_model, tmp_path):
    from posttrain.algos.d2l import api

    saved = d2l_model()
    with torch.no_grad():
        saved.hypernet.scale_B.normal_(0, 1.0)  # a generated LoRA that depends on the document
    saved.save_hypernet(tmp_path / "stage1")
    over = ["data.num_train=6", "data.num_eval=3", "algo.monitor_steps=2", "algo.monitor_docs=2", "trainer.max_steps=2"]
    cfg = d2l_cfg(*over, f"algo.init_hypernet={tmp_path / 'stage1'}")
    trainer = api.build_trainer(cfg, tmp_path / "run", callbacks=[JsonlMetricsCallback(tmp_path / "metrics.jsonl")])
    trainer.train()
    logs = [json.loads(line) for line in (tmp_path / "eval_metrics.jsonl").read_text().splitlines()]
    summaries = [r for r in logs if "eval_heldout_gap" in r]
    assert [r["step"] for r in summaries] == [0, 2]
    assert summaries[0]["eval_train_gap"] != 0.0  # the saved hypernet already tells documents apart


def test_resume_cuts_eval_metrics_back_to_the_checkpoint(tmp_path):
    cb = JsonlMetricsCallback(tmp_path / "metrics.jsonl")
    cb.eval_path.write_text("".join(json.dumps({"step": s, "eval_loss": 1.0}) + "\n" for s in (2, 4, 6)))
    state = SimpleNamespace(is_world_process_zero=True, global_step=4)
    cb.on_train_begin(None, state, None)
    assert [json.loads(line)["step"] for line in cb.eval_path.read_text().splitlines()] == [2, 4]
