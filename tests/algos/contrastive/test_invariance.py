"""The invariance objective: the loss falls as the injected state moves to its benign version, is bounded, moves
only the injected (and paraphrase) rows, cannot be met by a trained head alone when the head is frozen; the
output-consistency KL; last-prompt-token pooling at a chosen layer; the terms the trainer adds up."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posttrain.algos.contrastive.loss import (
    consistency_kl,
    invariance_bounds,
    invariance_nce,
)
from posttrain.algos.contrastive.model import ProjectionHead
from posttrain.data.chat import IGNORE_INDEX
from posttrain.data.contrastive import ALL_ROLES, TripletCollator, TripletDataset, generate_secalign
from tests.algos.contrastive.helpers import TINY, shifted_lm_loss


def _states(b: int = 6, d: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """Constructed states: request R, data D, injection I; benign R+D, paraphrase ~R+D, injected R+D+I,
    executed I+D (the injection as the request)."""
    g = torch.Generator().manual_seed(seed)
    r, data, inj = (torch.randn(b, d, generator=g) for _ in range(3))
    return {"benign": r + data, "cf": r + data + 0.2 * torch.randn(b, d, generator=g), "inj": inj, "data": data}


def _z(s: dict[str, torch.Tensor], alpha: float) -> torch.Tensor:
    """Unit rows [benign | cf | injected | executed] with the injected state at benign + alpha * I."""
    rows = torch.cat([s["benign"], s["cf"], s["benign"] + alpha * s["inj"], s["inj"] + s["data"]])
    return F.normalize(rows, dim=-1)


def test_invariance_loss_falls_as_the_injected_state_moves_to_the_benign_one():
    s = _states()
    losses = [float(invariance_nce(_z(s, a), 0.1)[0]) for a in (2.0, 1.0, 0.5, 0.25, 0.0)]
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    assert losses[0] > 5 * losses[-1]
    lo, hi = invariance_bounds(6, 0.1)
    assert all(lo <= x <= hi for x in losses)


def test_invariance_loss_by_hand_and_its_bounds():
    z = F.normalize(torch.randn(8, 5, generator=torch.Generator().manual_seed(1)), dim=-1)
    loss, stats = invariance_nce(z, 0.5)
    zb, zc, zi, ze = z[:2], z[2:4], z[4:6], z[6:]
    ref = []
    for k in range(2):
        negatives = [zb[1 - k], zc[1 - k], ze[0], ze[1]]  # 3B - 2 = 4: other benign / paraphrase, every executed
        for pos in (zb[k], zc[k]):
            logits = torch.stack([zi[k] @ pos] + [zi[k] @ n for n in negatives]) / 0.5
            ref.append(-torch.log_softmax(logits, 0)[0])
    assert torch.allclose(loss, torch.stack(ref).mean(), atol=1e-6)
    assert math.isclose(stats["sim_inj_exec"], float((zi * ze).sum(-1).mean()), rel_tol=1e-6)
    # without in-batch negatives only the own executed row competes: log(1 + e^((s_e - s_p) / t))
    alone = float(invariance_nce(z, 0.5, in_batch_negatives=False)[0])
    by_hand = sum(
        math.log1p(math.exp(float(zi[k] @ ze[k] - zi[k] @ p) / 0.5)) for k in range(2) for p in (zb[k], zc[k])
    )
    assert math.isclose(alone, by_hand / 4, rel_tol=1e-5)
    # positives opposite the anchor, executed rows on it: without in-batch negatives the upper bound itself; with
    # them the other example's benign / paraphrase sit at -1 too: log(3 + 2 e^4) < the bound (every negative at +1)
    e = F.one_hot(torch.tensor(0), 5).float()
    worst = torch.cat([-e.repeat(2, 1), -e.repeat(2, 1), e.repeat(2, 1), e.repeat(2, 1)])
    assert math.isclose(float(invariance_nce(worst, 0.5, False)[0]), invariance_bounds(2, 0.5, False)[1], rel_tol=1e-5)
    assert math.isclose(float(invariance_nce(worst, 0.5)[0]), math.log(3 + 2 * math.exp(4)), rel_tol=1e-5)
    assert float(invariance_nce(worst, 0.5)[0]) < invariance_bounds(2, 0.5)[1] == math.log(1 + 4 * math.exp(4))
    with pytest.raises(ValueError, match="multiple of 4"):
        invariance_nce(z[:6], 0.5)


def test_only_the_injected_and_paraphrase_rows_are_moved():
    """Benign and executed rows are targets (gradient stopped): the term never changes the model's benign
    behaviour or what it does with the injection as a trusted request."""
    z = F.normalize(torch.randn(12, 8), dim=-1).requires_grad_(True)
    invariance_nce(z, 0.1)[0].backward()
    norms = z.grad.norm(dim=-1)
    assert (norms[:3] == 0).all() and (norms[9:] == 0).all()
    assert (norms[3:9] > 0).all()


def test_a_trained_head_alone_lowers_the_invariance_term_a_frozen_one_cannot():
    """Why `algo.train_head` defaults to false: with the LM's states fixed, a trained head lowers the loss by
    dropping the injection's directions (it merges states the LM keeps apart); a frozen head leaves it where it is,
    so only moving the injected state itself (the LM's job) lowers it."""
    torch.manual_seed(0)
    b, d = 8, 32
    s = _states(b, d)
    directions = torch.randn(2, d)  # injections vary along a few directions (what a head can project out)
    s["inj"] = 3 * torch.randn(b, 2) @ directions
    rows = torch.cat([s["benign"], s["cf"], s["benign"] + s["inj"], s["inj"] + s["data"]])
    head = ProjectionHead(d, 16, 0)
    with torch.no_grad():
        start = float(invariance_nce(head(rows), 0.1)[0])
        moved = float(invariance_nce(head(torch.cat([s["benign"], s["cf"], s["benign"], rows[3 * b :]])), 0.1)[0])
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(300):
        loss = invariance_nce(head(rows), 0.1)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < start / 4  # the head alone: the LM did not change
    assert moved < start / 4  # the representation moved, under the frozen head


def test_consistency_kl_by_hand_and_its_gradient():
    torch.manual_seed(0)
    benign = torch.randn(5, 11, requires_grad=True)
    injected = torch.randn(5, 11, requires_grad=True)
    kl = consistency_kl(benign, injected)
    p, q = F.softmax(benign, -1), F.softmax(injected, -1)
    assert torch.allclose(kl, (p * (p.log() - q.log())).sum(-1).mean(), atol=1e-6)
    kl.backward()
    assert benign.grad is None and injected.grad.abs().sum() > 0  # the benign distribution is the target
    assert float(consistency_kl(benign, benign.detach().clone().requires_grad_(True))) == pytest.approx(0, abs=1e-6)
    with pytest.raises(ValueError, match="same answer tokens"):
        consistency_kl(benign, injected[:4])


@pytest.fixture(scope="module")
def tiny_model():
    from posttrain.algos.contrastive.api import build_model
    from posttrain.config.compose import load_config

    cfg = load_config([*TINY, "data=contrastive_secalign"])
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    rows = generate_secalign(3, seed=0)
    data = TripletDataset(rows, model.tokenizer, 384, "last", roles=ALL_ROLES)
    batch = TripletCollator(model.tokenizer.pad_token_id, roles=ALL_ROLES)([data[i] for i in range(3)])
    return cfg, model, batch


def test_last_pool_is_the_state_that_generates_the_first_answer_token(tiny_model):
    _, model, batch = tiny_model
    pool, labels = batch["pool_mask"], batch["labels"]
    assert pool.sum(1).tolist() == [1] * 12
    for row in range(12):
        first_answer = int((labels[row] != IGNORE_INDEX).nonzero()[0])
        assert int(pool[row].nonzero()) == first_answer - 1
    model.eval()
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], pool)
        pad = 9  # right padding changes nothing
        grown = [
            F.pad(batch[k], (0, pad), value=v) for k, v in (("input_ids", 0), ("attention_mask", 0), ("pool_mask", 0))
        ]
        again = model(*grown)
    assert torch.allclose(out.pooled, again.pooled, atol=1e-5)
    rows = torch.arange(12)
    assert torch.allclose(out.pooled, out.hidden[rows, pool.argmax(1)].float())


def test_layer_selects_a_hidden_state_and_layer_states_measures_them_all(tiny_model):
    _, model, batch = tiny_model
    args = (batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
    with torch.no_grad():
        states = model.layer_states(*args)
        assert states.shape[:2] == (3, 12)  # embeddings + 2 layers of tiny_llama, 12 rows
        for layer in (0, 1, -1):
            assert torch.allclose(model(*args, layer=layer).pooled, states[layer], atol=1e-6)
        assert not torch.allclose(states[1], states[2])
        # the same last prompt token ('\n' after the assistant header) in every row: equal embeddings
        assert torch.allclose(states[0][0], states[0][8])


def test_trainer_sums_the_weighted_terms(compose, tmp_path, tiny_model):
    from posttrain.algos.contrastive.api import build_trainer
    from posttrain.algos.contrastive.loss import answer_logits

    _, model, batch = tiny_model
    over = [
        *TINY,
        "data=contrastive_secalign",
        "algo.contrastive_weight=0.5",
        "algo.consistency_weight=2",
        "algo.lm_weight=3",
    ]
    cfg = compose(*over, run_dir=tmp_path)
    trainer = build_trainer(cfg, tmp_path)
    trainer.model, trainer.run_cfg = model, cfg
    model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
        out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
        head = model.output_embeddings()
        inv = invariance_nce(out.z, cfg.algo.temperature)[0]
        benign_and_injected = torch.cat([torch.arange(3), torch.arange(6, 9)])
        lm = shifted_lm_loss(out.hidden[benign_and_injected], batch["labels"][benign_and_injected], head)
        kl = consistency_kl(
            answer_logits(out.hidden[:3], batch["labels"][:3], head)[0],
            answer_logits(out.hidden[6:9], batch["labels"][6:9], head)[0],
        )
    model.train()
    assert float(kl) > 0
    assert torch.allclose(loss, 0.5 * inv + 2 * kl + 3 * lm, atol=1e-5)


@pytest.mark.parametrize("train_head", [False, True])
def test_the_head_trains_only_when_asked(compose, tmp_path, train_head):
    from posttrain.algos.contrastive.api import build_trainer

    cfg = compose(*TINY, "trainer.max_steps=2", f"algo.train_head={str(train_head).lower()}", run_dir=tmp_path)
    trainer = build_trainer(cfg, tmp_path)
    head = {k: v.clone() for k, v in trainer.model.head.state_dict().items()}
    lora = {k: v.clone() for k, v in trainer.model.lm.named_parameters() if "lora_B" in k}
    trainer.train()
    moved = any(not torch.equal(head[k], v) for k, v in trainer.model.head.state_dict().items())
    assert moved is train_head
    assert any(not torch.equal(lora[k], v) for k, v in trainer.model.lm.named_parameters() if k in lora)
