"""End-to-end `train.py algo=d2l ...` (in this interpreter; tests/test_console.py runs it as a subprocess):
training signal, checkpoints, resume, GPT-OSS, held-out gap."""

from __future__ import annotations

import json

import pytest

from posttrain.callbacks import read_metrics
from tests.conftest import run_cli

COMMON = ["algo=d2l", "data=d2l_synth", "trainer.progress_bar=false"]


def test_tiny_llama_trains_and_resumes(tmp_path):
    run = tmp_path / "run"
    proc = run_cli(
        *COMMON,
        "model=tiny_llama",
        "trainer.max_steps=40",
        "trainer.lr=2e-3",
        "trainer.save_steps=20",
        "data.num_train=200",
        "data.num_eval=4",
        "algo.max_new_tokens=4",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 41))
    ce = [m["ce_loss"] for m in metrics]
    assert all(c == c and abs(c) < 100 for c in ce)  # finite
    assert sum(ce[-5:]) / 5 < sum(ce[:5]) / 5 - 0.1, ce  # falling
    assert all(m["gen_lora_l1_norm"] > 0 for m in metrics)
    assert all(m["grad_norm"] > 0 for m in metrics)  # the hypernet's gradient (the base is frozen)
    ckpt = run / "checkpoints" / "checkpoint-40"
    names = {p.name for p in ckpt.iterdir()}
    assert {"hypernet.safetensors", "hypernet_config.json", "trainer_state.json", "COMPLETE"} <= names
    assert not names & {
        "pytorch_model.bin",
        "model.safetensors",
        "training_args.bin",
    }  # no base weights, no args pickle
    summary = json.loads((run / "summary.json").read_text())
    assert {"eval_d2l_answer_loss", "eval_no_context_answer_loss", "internalize_ms_per_doc"} <= set(summary)
    # resume=auto picks up checkpoint-40 and continues to 50 from there
    proc = run_cli(
        *COMMON,
        "model=tiny_llama",
        "trainer.max_steps=50",
        "trainer.lr=2e-3",
        "trainer.save_steps=20",
        "data.num_train=200",
        "data.num_eval=4",
        "algo.eval_at_end=false",
        "resume=auto",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from" in proc.stdout and "checkpoint-40" in proc.stdout
    steps = [m["step"] for m in read_metrics(run / "metrics.jsonl")]
    assert steps == list(range(1, 51))
    assert (run / "checkpoints" / "checkpoint-50" / "hypernet.safetensors").is_file()
    # mode=eval of the trained run's newest checkpoint, into another directory
    proc = run_cli(
        *COMMON,
        "model=tiny_llama",
        "mode=eval",
        "data.num_eval=4",
        "algo.max_new_tokens=4",
        f"eval.checkpoint={run / 'checkpoints' / 'checkpoint-50'}",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert set(result) >= {"no_context", "in_context", "d2l", "d2l_other_doc", "internalize_ms_per_doc"}
    assert result["num_docs"] == 4


def test_tiny_gpt_oss_runs(tmp_path):
    run = tmp_path / "run"
    proc = run_cli(
        *COMMON,
        "model=tiny_gpt_oss",
        "trainer.max_steps=3",
        "data.num_train=16",
        "data.num_eval=2",
        "algo.max_new_tokens=3",
        "algo.kl_coef=0.5",
        "algo.kl_top_k=8",
        "algo.l1_coef=0.01",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert m["kl_loss"] >= 0 and m["gen_lora_l1_norm"] > 0 and m["ce_loss"] > 0
    assert list((run / "cache").glob("teacher_topk_*.safetensors"))
    spec = json.loads((run / "checkpoints" / "checkpoint-3" / "hypernet_config.json").read_text())
    assert spec["layers"] == [0, 1, 2, 3] and spec["modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]


@pytest.mark.slow
def test_held_out_d2l_beats_no_context_and_the_other_document(tmp_path):
    """A CPU-budget run (about a minute) that must show a *document-specific* LoRA on held-out documents.

    Beating no-context is not enough: a document-independent answer prior (answer format, end-of-turn token) does
    that too. The generated LoRA must also beat the LoRA generated from another held-out document. The budget
    fits the simplest synthetic task: one attribute (the city) per document, so every answer is one of 8 cities
    that only the document names, and the frozen random base has `initializer_range=0.1` (a head that can be
    steered; experiments/d2l_tiny: run B). Measured (answer loss, nats/token, seed 0): no context 5.96, D2L 2.38,
    other document 4.13 (other - D2L: 1.45 and 2.65 with seeds 1 and 2). The former version of this test (300
    steps of the default task: 2 attributes, init 0.02) gave D2L 5.32 and other document 5.39: a prior only.
    """
    run = tmp_path / "run"
    proc = run_cli(
        *COMMON,
        "model=tiny_llama",
        "model.arch.initializer_range=0.1",
        "trainer.max_steps=250",
        "trainer.lr=3e-3",
        "trainer.logging_steps=25",
        "data.num_train=2000",
        "data.num_eval=32",
        "data.params.num_attributes=1",
        "+data.params.attributes=[city]",
        "algo.max_new_tokens=4",
        f"hydra.run.dir={run}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run / "eval.json").read_text())
    d2l, other, none, ctx = (result[c]["answer_loss"] for c in ("d2l", "d2l_other_doc", "no_context", "in_context"))
    print(f"held-out answer loss: d2l {d2l:.3f}  other doc {other:.3f}  no context {none:.3f}  in context {ctx:.3f}")
    assert d2l < none - 1.0, result
    assert d2l < other - 0.5, result  # document-specific, not only a prior
