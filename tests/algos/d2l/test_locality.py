"""The locality term (`algo.locality_coef`): each training question's other-entity view is a question of the same
kind about another document; the loss is KL(base || base + own LoRA) on that view's reply, exactly 0 while the
generated LoRA is zero, equal to the KL computed by hand once it is not, trained through the hypernet, and refused
for questions without kinds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posttrain.algos.d2l.batching import D2LCollator
from posttrain.algos.d2l.locality import answer_only, attach_other_entity
from posttrain.algos.d2l.loss import d2l_loss
from posttrain.algos.d2l.monitor import document_index
from posttrain.config.validate import ConfigError
from posttrain.data.d2l import d2l_records, featurize
from posttrain.errors import DataError

FACTS = ("algo=d2l", "data=d2l_facts", "data.num_train=6", "data.num_eval=2", "+data.params.num_facts=3")


@pytest.fixture
def facts(compose):
    """(tiny D2L model, its config, the training records and their featurized rows with the other-entity view)."""
    from posttrain.algos.d2l import build_model

    cfg = compose(*FACTS, "+data.params.single_hop=3", "+data.params.two_hop=0")
    model = build_model(cfg)
    records = d2l_records(cfg.data, model.tokenizer)[0]
    rows = [featurize(r, model.tokenizer, cfg.algo.max_length, cfg.algo.encoder.max_doc_length) for r in records]
    return model, cfg, records, rows


def test_each_question_is_paired_with_the_same_kind_about_another_document(facts):
    _, _, records, rows = facts
    own = [list(r["input_ids"]) for r in rows]
    paired = attach_other_entity(rows, records)
    _, doc = document_index(records)
    assert 0 < paired <= len(rows) and paired == sum(r["o_keep"] for r in rows)
    for j, row in enumerate(rows):
        if not row["o_keep"]:
            assert row["o_input_ids"] == own[j]
            assert not any(doc[k] != doc[j] and records[k]["kind"] == records[j]["kind"] for k in range(len(rows)))
            continue
        k = own.index(list(row["o_input_ids"]))
        assert doc[k] != doc[j] and records[k]["kind"] == records[j]["kind"]
        assert row["o_labels"] == rows[k]["labels"]


def test_the_answer_span_keeps_only_the_paired_answers_tokens(facts):
    model, _, records, rows = facts
    whole = [list(r["labels"]) for r in rows]
    attach_other_entity(rows, records, span="answer", tokenizer=model.tokenizer)
    own = [list(r["input_ids"]) for r in rows]
    for row in rows:
        if not row["o_keep"]:
            continue
        k = own.index(list(row["o_input_ids"]))
        kept = [t for t in row["o_labels"] if t != -100]
        assert model.tokenizer.decode(kept).strip() == records[k]["answer"]
        assert len(kept) < sum(t != -100 for t in whole[k])  # the reply's other tokens are left out
        assert all(t in (-100, w) for t, w in zip(row["o_labels"], whole[k], strict=True))
    assert answer_only([1, 2, 3], "never there", model.tokenizer) is None


def test_questions_without_kinds_are_refused(d2l_cfg):
    with pytest.raises(ConfigError, match="locality_coef"):
        d2l_cfg("algo.locality_coef=1")  # data=d2l_synth: no kinds, refused at compose
    cfg = d2l_cfg()
    records = d2l_records(cfg.data)[0][:8]
    rows = [{"input_ids": [1], "labels": [1]} for _ in records]
    with pytest.raises(DataError, match="locality_coef"):
        attach_other_entity(rows, [{k: v for k, v in r.items() if k != "kind"} for r in records])


def _by_hand(model, batch) -> torch.Tensor:
    """KL(base || base + own LoRA) per labelled token of the other-entity view, with the model's own pieces."""
    view = batch["o_input_ids"], batch["o_attention_mask"]
    sel = batch["o_labels"][:, 1:] != -100
    with torch.no_grad():
        lora = model.lora_from_ids(batch["ctx_ids"], batch["ctx_mask"], batch["ctx_doc"])
        model.reset()
        base = model.base(input_ids=view[0], attention_mask=view[1]).logits[:, :-1][sel]
        model.apply_lora(lora)
        tuned = model.base(input_ids=view[0], attention_mask=view[1]).logits[:, :-1][sel]
        model.reset()
    p, q = F.log_softmax(base.float(), -1), F.log_softmax(tuned.float(), -1)
    keep = batch["o_keep"][:, None].expand_as(sel)[sel]
    return (p.exp() * (p - q)).sum(-1)[keep]


def test_locality_is_the_kl_to_the_base_model_on_the_other_entitys_reply(facts):
    model, _, records, rows = facts
    attach_other_entity(rows, records)
    batch = D2LCollator(model.tokenizer.pad_token_id)(rows[:6])
    assert batch["o_keep"].any()
    loss, stats = d2l_loss(model, batch, ce_coef=0.0, locality_coef=1.0)
    assert stats["locality_loss"] == 0.0 and float(loss.detach()) == 0.0  # the generated LoRA starts at zero
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)
    loss, stats = d2l_loss(model, batch, ce_coef=0.0, locality_coef=2.0)
    expected = _by_hand(model, batch).mean()
    assert float(expected) > 1e-3
    torch.testing.assert_close(torch.tensor(stats["locality_loss"]), expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(loss, 2.0 * expected, rtol=1e-4, atol=1e-6)
    loss.backward()  # the locality term alone trains the hypernet, never the base
    assert model.hypernet.scale_B.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.base.parameters())
    model.hypernet.zero_grad()
    batch["o_keep"][:] = False  # no paired row: nothing to keep local
    _, stats = d2l_loss(model, batch, ce_coef=1.0, locality_coef=1.0)
    assert stats["locality_loss"] == 0.0


def test_locality_needs_the_other_entity_view(facts):
    model, _, _, rows = facts
    batch = D2LCollator(model.tokenizer.pad_token_id)(rows[:2])
    with pytest.raises(ValueError, match="other-entity view"):
        d2l_loss(model, batch, locality_coef=1.0)
