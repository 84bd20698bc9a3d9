"""Pooling, the representation term reaching the adapters (not a fixed head), the shifted LM loss, NaN guard."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.contrastive.api import build_model, build_trainer
from posttrain.algos.contrastive.loss import invariance_nce
from posttrain.algos.contrastive.model import ProjectionHead, masked_mean
from posttrain.data.contrastive import TripletCollator, TripletDataset, generate_triplets
from posttrain.data.contrastive.schema import ALL_ROLES
from posttrain.errors import TrainingError
from tests.algos.contrastive.helpers import TINY, lm_rows, shifted_lm_loss


@pytest.fixture(scope="module")
def tiny(request):
    from posttrain.config.compose import load_config

    cfg = load_config(list(TINY))
    torch.manual_seed(0)
    model = build_model(cfg)
    tok = model.tokenizer
    # give LoRA B non-zero values so adapters matter in these checks
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    ds = TripletDataset(generate_triplets(4, seed=0), tok, 384)
    batch = TripletCollator(tok.pad_token_id)([ds[i] for i in range(4)])
    return cfg, model, tok, batch


def test_masked_mean_all_padding_row_is_finite_zero():
    hidden = torch.randn(3, 5, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    pooled = masked_mean(hidden, mask)
    assert torch.isfinite(pooled).all() and torch.equal(pooled[1], torch.zeros(4))
    assert torch.allclose(pooled[0], hidden[0, :2].mean(0)) and torch.allclose(pooled[2], hidden[2].mean(0))
    pooled.sum().backward()
    assert torch.isfinite(hidden.grad).all() and (hidden.grad[1] == 0).all()
    z = ProjectionHead(4, 3, 0)(pooled)  # the head on a zero row stays finite too
    assert torch.isfinite(z).all()


def test_model_forward_with_all_padding_row(tiny):
    cfg, model, tok, batch = tiny
    pool_mask = batch["pool_mask"].clone()
    pool_mask[1] = 0  # a row with nothing to pool
    out = model(batch["input_ids"], batch["attention_mask"], pool_mask)
    assert torch.equal(out.pooled[1], torch.zeros_like(out.pooled[1]))
    assert torch.isfinite(out.z).all()


def test_extra_right_padding_changes_nothing(tiny):
    cfg, model, tok, batch = tiny
    out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
    pad = 7
    ids = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=tok.pad_token_id)
    am = torch.nn.functional.pad(batch["attention_mask"], (0, pad))
    pm = torch.nn.functional.pad(batch["pool_mask"], (0, pad))
    out2 = model(ids, am, pm)
    assert torch.allclose(out.pooled, out2.pooled, atol=1e-5) and torch.allclose(out.z, out2.z, atol=1e-5)
    labels2 = torch.nn.functional.pad(batch["labels"], (0, pad), value=-100)
    head = model.output_embeddings()
    assert torch.allclose(
        shifted_lm_loss(out.hidden, batch["labels"], head), shifted_lm_loss(out2.hidden, labels2, head)
    )


def test_lm_loss_is_shifted_like_the_causal_lm(tiny):
    cfg, model, tok, batch = tiny
    out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
    rows = lm_rows(12, with_counterfactual=False)
    assert rows.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    mine = shifted_lm_loss(out.hidden[rows], batch["labels"][rows], model.output_embeddings())
    ref = model.lm(
        input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows], labels=batch["labels"][rows]
    ).loss  # HF shifts internally
    assert torch.allclose(mine, ref, atol=1e-5)


@pytest.mark.parametrize("on_injected", [True, False])
def test_lm_on_injected_selects_the_rows_the_trainer_scores(compose, tmp_path, tiny, on_injected):
    """The trainer's LM term reads the injected rows only with algo.lm_on_injected; the plan counts what it reads."""
    from posttrain.algos.registry import get_algorithm

    _, model, tok, batch = tiny
    cfg = compose(*TINY, f"algo.lm_on_injected={str(on_injected).lower()}", run_dir=tmp_path)
    assert lm_rows(12, False, with_injected=on_injected).tolist() == [True] * 4 + [False] * 4 + [on_injected] * 4
    trainer = build_trainer(cfg, tmp_path)
    trainer.model, trainer.run_cfg = model, cfg
    trainer.run_cfg.algo.contrastive_weight = 0.0  # the LM term alone
    trainer.run_cfg.algo.consistency_weight = 0.0
    model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
        out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
        rows = lm_rows(12, False, with_injected=on_injected)
        ref = shifted_lm_loss(out.hidden[rows], batch["labels"][rows], model.output_embeddings())
        benign_only = shifted_lm_loss(out.hidden[:4], batch["labels"][:4], model.output_embeddings())
    model.train()
    assert torch.allclose(loss, ref, atol=1e-6)
    assert torch.allclose(loss, benign_only, atol=1e-6) is (not on_injected)
    # the memory plan's logit rows are the blocks the loss terms read (terms.lm_blocks, + consistency's two)
    from posttrain.algos.contrastive.terms import BENIGN, INJECTED, lm_blocks

    read = set(lm_blocks(cfg.algo)) | ({BENIGN, INJECTED} if cfg.algo.consistency_weight > 0 else set())
    assert get_algorithm("contrastive").workload(cfg).logit_rows == cfg.trainer.per_device_batch_size * len(read)


def test_lm_loss_scores_the_next_token():
    """hidden[t] points at token t+1: the shifted loss is ~0; scoring token t instead would be large."""
    labels = torch.tensor([[-100, -100, 3, 1, 2]])
    ids = torch.tensor([[4, 0, 3, 1, 2]])
    hidden = 20.0 * torch.nn.functional.one_hot(torch.roll(ids, -1, dims=1), 5).float()
    head = torch.nn.Identity()
    assert float(shifted_lm_loss(hidden, labels, head)) < 1e-6
    wrong = 20.0 * torch.nn.functional.one_hot(ids, 5).float()
    assert float(shifted_lm_loss(wrong, labels, head)) > 10


def test_contrastive_term_trains_the_adapters(tiny):
    cfg, model, tok, batch = tiny
    model.zero_grad()
    four = TripletDataset(generate_triplets(4, seed=0), tok, 384, roles=ALL_ROLES)  # + the executed block
    batch = TripletCollator(tok.pad_token_id)([four[i] for i in range(4)])
    out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
    invariance_nce(out.z, cfg.algo.temperature)[0].backward()
    lora_grads = [p.grad for n, p in model.lm.named_parameters() if "lora_" in n and p.grad is not None]
    assert lora_grads and max(float(g.abs().max()) for g in lora_grads) > 0
    assert not cfg.algo.train_head and all(p.grad is None for p in model.head.parameters())  # a fixed projection
    model.zero_grad()


def test_nan_loss_stops_with_a_clear_error(compose, tmp_path):
    cfg = compose(*TINY, "trainer.max_steps=2", run_dir=tmp_path)
    trainer = build_trainer(cfg, tmp_path)
    with torch.no_grad():
        next(p for n, p in trainer.model.named_parameters() if "lora_A" in n).fill_(float("nan"))
    with pytest.raises(TrainingError, match=r"non-finite loss \(nan\) at step 1"):
        trainer.train()


@pytest.mark.parametrize("from_checkpoint", [False, True])
def test_before_scores_are_the_start_weights_and_training_is_restored(compose, tmp_path, from_checkpoint):
    from posttrain.algos.contrastive.evaluate import evaluate_model, evaluate_start
    from posttrain.data.contrastive import build_triplets
    from posttrain.run import run

    over = [*TINY, "data.num_eval=4", "algo.max_new_tokens=4", "trainer.max_steps=2", "trainer.lr=0.2"]
    if from_checkpoint:
        run(compose(*over, "algo.eval_at_end=false", run_dir=tmp_path / "start"))
        over.append(f"algo.init_from={tmp_path / 'start' / 'checkpoints' / 'checkpoint-2'}")
    cfg = compose(*over, run_dir=tmp_path / "run")
    trainer = build_trainer(cfg, tmp_path / "run")
    trainer.train()
    model, tok = trainer.model, trainer.processing_class
    rows = build_triplets(cfg.data, "eval")
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    after = evaluate_model(cfg, model, tok, rows, return_replies=True)["replies"]
    before = evaluate_start(cfg, model, tok, rows=rows, return_replies=True)["replies"]
    fresh_model = build_model(cfg)  # what the start weights really generate
    assert before == evaluate_model(cfg, fresh_model, tok, rows, return_replies=True)["replies"]
    assert before != after  # lr 0.2 for two steps changes the greedy replies
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())  # trained weights put back
