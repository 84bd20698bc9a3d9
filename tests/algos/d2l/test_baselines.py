"""The evaluation's baselines: PEFT LoRAs at the generated LoRA's rank on the plain base (format-only LoRA, per-document
context distillation), the in-context baseline cut to the context window, the "same LoRA, other entity" control."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from posttrain.algos.d2l.baselines import distilled_lora, format_lora, lm_answer_logits, peft_lora
from posttrain.algos.d2l.batching import D2LCollator
from posttrain.algos.d2l.config import D2LBaselinesConfig
from posttrain.algos.d2l.evaluate import evaluate_model
from posttrain.algos.d2l.loss import topk_kl
from posttrain.algos.d2l.teacher import teacher_topk
from posttrain.data.d2l import fact_qa, featurize, in_context_prompt, in_context_view, window_document


def _logits(model, ids):
    return model.base(input_ids=ids, use_cache=False).logits


def _scaled(model):
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)
    return model


def test_a_peft_lora_lives_on_the_plain_base_and_leaves_it_as_it_was(d2l_model):
    model = _scaled(d2l_model("algo.rank=2", "algo.target_modules=[q_proj,down_proj]"))
    ids = torch.tensor([model.tokenizer("Where does Bazoru live?", add_special_tokens=False)["input_ids"]])
    lora = model.internalize("Bazoru lives in Oslo.")
    before = _logits(model, ids)
    model.apply_lora(lora)
    generated = _logits(model, ids)
    model.reset()
    with peft_lora(model, seed=0) as params:
        # rank 2 on q_proj (64 -> 64) and down_proj (128 -> 64) of both layers: r * (d_in + d_out) each
        assert sum(p.numel() for p in params) == 2 * (2 * (64 + 64) + 2 * (128 + 64))
        torch.testing.assert_close(_logits(model, ids), before)  # PEFT's init: B = 0
        with torch.no_grad():
            for p in params:
                p.normal_()
        assert (_logits(model, ids) - before).abs().max() > 1e-3
    torch.testing.assert_close(_logits(model, ids), before, rtol=0, atol=0)  # unloaded: the base as it was
    model.apply_lora(lora)  # and the generated LoRA's wrappers are back in place
    torch.testing.assert_close(_logits(model, ids), generated, rtol=0, atol=0)
    model.reset()


STEERABLE = ("algo.target_modules=[o_proj,down_proj]", "model.arch.initializer_range=0.1")  # a tiny model a LoRA moves


@torch.no_grad()
def _ce(model, rows):
    batch = D2LCollator(model.tokenizer.pad_token_id)(rows)
    logits, targets, _ = lm_answer_logits(model.base, batch)
    return float(torch.nn.functional.cross_entropy(logits, targets))


def test_format_lora_learns_the_reply_format_without_documents(d2l_model):
    model = d2l_model(*STEERABLE)
    rows = [featurize(r, model.tokenizer, 128, 256) for r in fact_qa(4, seed=0, num_facts=2, single_hop=1, two_hop=0)]
    before = _ce(model, rows)
    with format_lora(model, rows, steps=30, lr=5e-2, batch_size=4, seed=0) as seconds:
        after = _ce(model, rows)
    assert seconds > 0 and after < before - 2.0, (before, after)  # measured: 6.01 -> 2.89 nats
    assert _ce(model, rows) == pytest.approx(before, abs=1e-6)  # removed on exit


def test_context_distillation_matches_the_in_context_teacher(d2l_model):
    """After distilling, the LoRA'd student (question only) is closer to the teacher (document + question) on the
    teacher's own answers: the top-k KL falls (the random tiny teacher spreads its mass thinly, so the student must
    gather almost all of its own on the teacher's 16 tokens: a floor well above 0)."""
    model = d2l_model(*STEERABLE)
    doc = "Bazoru lives in Oslo. Bazoru plays the cello."
    probes = ["Where does Bazoru live?", "What does Bazoru play?"]
    answers = model.generate([in_context_prompt(doc, p) for p in probes], None, 4)
    rows = [featurize({"document": doc, "question": p, "answer": a}, model.tokenizer, 128, 256)
            for p, a in zip(probes, answers)]  # fmt: skip
    top = teacher_topk(model, rows, 16)
    t_idx, t_logp = torch.cat([i for i, _ in top]), torch.cat([lp for _, lp in top])
    batch = D2LCollator(model.tokenizer.pad_token_id)(rows)

    def kl() -> float:
        with torch.no_grad():
            return float(topk_kl(lm_answer_logits(model.base, batch)[0], t_idx, t_logp))

    before = kl()
    common = {"top_k": 16, "max_length": 128, "max_new_tokens": 4, "seed": 0}
    with distilled_lora(model, doc, probes, steps=40, lr=3e-2, **common) as seconds:
        after = kl()
    assert seconds > 0 and after < 0.75 * before, (before, after)  # measured: 1.95 -> 1.28
    assert kl() == pytest.approx(before, rel=1e-6)


def test_window_document_fits_the_window_and_is_the_documents_start(d2l_model):
    tok = d2l_model().tokenizer
    rec = fact_qa(1, seed=0, held_out=True)[0]
    for window in (96, 160, 512):
        cut = window_document(rec, tok, 128, window)
        view = in_context_view(cut, rec, tok, 128, window)
        assert len(view["input_ids"]) <= window and rec["document"].startswith(cut)
        assert window > 400 or len(cut) < len(rec["document"])  # the tiny tokenizer: a token per byte
    with pytest.raises(Exception, match="context window of 40 tokens"):
        window_document(rec, tok, 128, 40)


def test_every_condition_on_long_documents(d2l_cfg, d2l_model):
    """Documents of 8x a 128-token window (1024 tokens, past the tiny model's 512 positions): the full in-context
    condition is skipped, the truncated one reads 128 tokens, D2L reads 8 chunks of 128; the other-entity control
    asks another document's entity the same kind of question; CD runs on the documents asked for."""
    from posttrain.data.d2l.facts import fact_documents
    from posttrain.models.tokenizer import build_byte_tokenizer

    overrides = ("algo.encoder.max_doc_length=128", "algo.encoder.max_chunks=8")
    model = _scaled(d2l_model(*overrides))
    tok = build_byte_tokenizer("llama", "llama3.jinja")
    docs = fact_documents(3, seed=0, held_out=True, num_facts=4, single_hop=2, two_hop=1, eval_doc_tokens=1024,
                          tokenizer=tok)  # fmt: skip
    records = fact_qa(3, seed=0, held_out=True, num_facts=4, single_hop=2, two_hop=1, eval_doc_tokens=1024,
                      tokenizer=tok)  # fmt: skip
    baselines = OmegaConf.structured(D2LBaselinesConfig(format_lora_steps=2, cd_steps=2, cd_max_docs=2))
    out = evaluate_model(
        model, records, 128, max_new_tokens=3, context_window=128, baselines=baselines, train_records=records[:4]
    )
    assert out["conditions"] == [
        "no_context", "in_context_truncated", "d2l", "d2l_other_doc", "d2l_other_entity", "format_lora", "cd",
    ]  # fmt: skip
    assert "in_context" not in out and out["context_window"] == 128
    per = out["per_question"]
    assert all(960 <= p["doc_tokens"] <= 1024 for p in per) and len(per) == len(records) >= 8
    assert out["cd"]["n"] == sum(p["doc"] < 2 for p in per) and out["cd_docs"] == 2 and out["cd_ms_per_doc"] > 0
    assert all(("cd" in p) == (p["doc"] < 2) for p in per)
    assert out["format_lora"]["n"] == len(per) and out["format_lora_train_s"] > 0
    # other entity: the same kind of question about the next document that has one, scored against its answer
    paired = 0
    for p in per:
        twins = [q for step in (1, 2) for q in per if q["doc"] == (p["doc"] + step) % 3 and q["kind"] == p["kind"]]
        assert ("d2l_other_entity" in p) == bool(twins)
        if twins:
            paired += 1
            other = p["d2l_other_entity"]
            assert other["tokens"] == twins[0]["no_context"]["tokens"] and "own_fact" in other
    assert out["d2l_other_entity"]["n"] == paired > 0
    own = [p["d2l_other_entity"]["own_fact"] for p in per if "d2l_other_entity" in p]
    assert out["d2l_other_entity"]["own_fact"] == pytest.approx(sum(own) / paired)
    # in_window: the question's evidence lies in what the 128-token window leaves of the document
    assert [p["in_window"] for p in per] == [
        r["evidence_end"] <= len(window_document(r, tok, 128, 128)) for r in records
    ]
    assert {d["document"] for d in docs} == {r["document"] for r in records}
    for cond in out["conditions"]:
        entry = out[cond]
        assert entry["accuracy_ci95"][0] <= entry["accuracy"] <= entry["accuracy_ci95"][1]
        assert entry["answer_loss_ci95"][0] <= entry["answer_loss"] <= entry["answer_loss_ci95"][1]


def test_adapter_baselines_on_bf16_weights(d2l_model):
    """The GPU profiles' bf16 base: PEFT keeps the adapters fp32 (as D2L's hypernet), the losses stay finite, the
    base is bit-identical afterwards."""
    model = d2l_model(*STEERABLE)
    model.base.to(torch.bfloat16)
    frozen = {k: v.clone() for k, v in model.base.state_dict().items()}
    rows = [featurize(r, model.tokenizer, 128, 256) for r in fact_qa(4, seed=0, num_facts=2, single_hop=1, two_hop=0)]
    with peft_lora(model, seed=0) as params:
        assert {p.dtype for p in params} == {torch.float32}
    before = _ce(model, rows)
    with format_lora(model, rows, steps=10, lr=5e-2, batch_size=4, seed=0):
        after = _ce(model, rows)
    assert after < before - 0.5, (before, after)
    baselines = OmegaConf.structured(D2LBaselinesConfig(cd_steps=2))
    out = evaluate_model(model, fact_qa(2, seed=0, held_out=True, num_facts=2, single_hop=2), 128, max_new_tokens=3,
                         baselines=baselines, generate=False)  # fmt: skip
    assert all(0 < out[c]["answer_loss"] < 20 for c in out["conditions"])
    assert all(torch.equal(v, frozen[k]) for k, v in model.base.state_dict().items())
