"""`algo.preference=dpo`: SecAlign-style pairs on TRL's DPOTrainer, the representation terms added to its loss, and
checkpoints (adapters + head) that resume exactly and score in mode=eval."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from posttrain.algos.contrastive.api import build_trainer
from posttrain.algos.contrastive.checkpoint import ADAPTER_FILE, HEAD_FILE
from posttrain.algos.contrastive.dpo import ROWS_PREFIX, SecAlignDPOTrainer, preference_pairs
from posttrain.algos.contrastive.terms import loss_terms
from posttrain.callbacks import read_metrics
from posttrain.data.contrastive import generate_secalign
from posttrain.run import run
from tests.algos.contrastive.helpers import TINY

DPO = (*TINY, "data=contrastive_secalign", "algo.preference=dpo", "data.num_train=8", "data.params.num_ifeval=0")


def test_pairs_prefer_the_benign_answer_to_the_injected_prompt():
    rows = generate_secalign(3, seed=0)
    pairs = preference_pairs(rows)
    for pair, row in zip(pairs, rows):
        assert pair["prompt"][0]["content"] == f"{row['injected']['request']}\n---\n{row['injected']['data']}"
        assert pair["chosen"] == [{"role": "assistant", "content": row["answer"]}]
        assert pair["rejected"] == [{"role": "assistant", "content": row["injected_answer"]}]


def test_dpo_loss_plus_the_invariance_terms(compose, tmp_path):
    cfg = compose(*DPO, "algo.lm_weight=0", "algo.consistency_weight=2", run_dir=tmp_path)
    trainer = build_trainer(cfg, tmp_path)
    assert isinstance(trainer, SecAlignDPOTrainer) and trainer.args.loss_type == ["sigmoid"]
    with torch.no_grad():
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)  # the policy differs from its reference (adapters disabled)
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch[ROWS_PREFIX + "input_ids"].shape[0] == 4 * batch["input_ids"].shape[0] // 2  # 4 blocks per pair
    trainer.model.eval()
    with torch.no_grad():
        total = trainer.compute_loss(trainer.model, dict(batch))
        pairs_only = {k: v for k, v in batch.items() if not k.startswith(ROWS_PREFIX)}
        dpo = super(SecAlignDPOTrainer, trainer).compute_loss(trainer.model, pairs_only)
        rows = {k[len(ROWS_PREFIX) :]: v for k, v in batch.items() if k.startswith(ROWS_PREFIX)}
        module = trainer.contrastive_module()
        out = module(rows["input_ids"], rows["attention_mask"], rows["pool_mask"])
        terms, stats = loss_terms(out, rows["labels"], module.output_embeddings(), cfg.algo, with_lm=False)
    assert stats["kl"] > 0 and stats["inv"] > 0 and "lm_loss" not in stats
    assert float(dpo) != pytest.approx(0.6931, abs=1e-3)  # not DPO's untrained log 2
    assert torch.allclose(total, dpo + terms, atol=1e-5)


def test_dpo_trains_resumes_exactly_and_scores(compose, tmp_path, capsys):
    over = (*DPO, "trainer.max_steps=4", "trainer.save_steps=2", "data.num_eval=1", "algo.max_new_tokens=4")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(compose(*over, "algo.eval_at_end=false", run_dir=straight))
    (resumed / "checkpoints").mkdir(parents=True)

    shutil.copytree(straight / "checkpoints" / "checkpoint-2", resumed / "checkpoints" / "checkpoint-2")
    shutil.copy(straight / "run_identity.json", resumed / "run_identity.json")
    capsys.readouterr()
    run(compose(*over, "resume=auto", run_dir=resumed))
    assert "resuming from" in capsys.readouterr().out
    a, b = (d / "checkpoints" / "checkpoint-4" for d in (straight, resumed))
    wa, wb = load_file(str(a / ADAPTER_FILE)), load_file(str(b / ADAPTER_FILE))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(float(v.abs().max()) > 0 for k, v in wa.items() if "lora_B" in k)  # DPO moved the adapters
    assert load_file(str(a / HEAD_FILE)).keys() == load_file(str(b / HEAD_FILE)).keys()
    steps = [(m["step"], m["loss"], m["inv"]) for m in read_metrics(straight / "metrics.jsonl")]
    assert steps[2:] == [(m["step"], m["loss"], m["inv"]) for m in read_metrics(resumed / "metrics.jsonl")]
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["asr_heldout_after"] is not None and "paired_after_minus_before" in summary
    run(compose(*over, "mode=eval", run_dir=straight))
    scored = json.loads((straight / "summary.json").read_text())
    assert scored["checkpoint"].endswith("checkpoint-4") and scored["eval"]["n_clusters"] == 1
