"""Where the D2L model computes: a move of the D2L model (`.to(device)` / a dtype cast) must reach every tensor
its forward uses — the context encoder's copy included — and the teacher cache and `mode=eval` must compute where
the model was placed. On CPU a cast to float64 stands in for a move to an accelerator: any tensor the move missed
still computes in float32."""

from __future__ import annotations

import pytest
import torch

from posttrain.algos.d2l.batching import D2LCollator
from posttrain.algos.d2l.encoder import backbone_of
from posttrain.data.d2l import d2l_records, featurize

MOVED = torch.float64  # the stand-in for "on the accelerator"


def _batch(model, cfg, n=4):
    records = d2l_records(cfg.data)[0][:n]
    rows = [featurize(r, model.tokenizer, cfg.algo.max_length, cfg.algo.encoder.max_doc_length) for r in records]
    return D2LCollator(model.tokenizer.pad_token_id)(rows)


def _record_dtypes(modules) -> tuple[list[torch.dtype], list]:
    """Forward hooks that record the dtype of every output of `modules` (removed by the returned handles)."""
    seen: list[torch.dtype] = []

    def hook(_m, _i, out):
        t = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)
        seen.append(t.dtype)

    return seen, [m.register_forward_hook(hook) for m in modules]


@pytest.mark.parametrize("share", [True, False])
def test_a_move_reaches_the_context_encoder(d2l_cfg, d2l_model, share):
    cfg = d2l_cfg(f"algo.encoder.share_weights={str(share).lower()}")
    model = d2l_model(f"algo.encoder.share_weights={str(share).lower()}")
    batch = _batch(model, cfg)
    enc = model.encoder.backbone
    base_tensors = {t.data_ptr() for t in backbone_of(model.base).parameters()}
    shared = {t.data_ptr() for t in enc.parameters()} <= base_tensors
    assert shared == share  # share_weights=false really is a copy
    model.to(MOVED)
    stale = [
        n for n, t in [*enc.named_parameters(), *enc.named_buffers()] if t.is_floating_point() and t.dtype != MOVED
    ]
    assert not stale, f"not moved with the model: {stale}"
    seen, handles = _record_dtypes(list(enc.layers) + [backbone_of(model.base)])
    try:
        logits, lora, _, _ = model(
            batch["ctx_ids"], batch["ctx_mask"], batch["input_ids"], batch["attention_mask"], labels=batch["labels"]
        )
    finally:
        for h in handles:
            h.remove()
    assert len(seen) >= len(enc.layers) + 1 and set(seen) == {MOVED}, seen
    assert logits.dtype == torch.float32 and all(a.dtype == MOVED for a in lora.A.values())


def _watch_models(monkeypatch, seen: list) -> None:
    """Every D2L model the API builds records the dtype its LM head computes in."""
    from posttrain.algos.d2l import api

    build = api.build_model

    def build_and_watch(cfg):
        model = build(cfg)
        model.base.get_output_embeddings().register_forward_hook(lambda _m, inp, _o: seen.append(inp[0].dtype))
        return model

    monkeypatch.setattr(api, "build_model", build_and_watch)


def test_teacher_cache_is_computed_where_the_trainer_placed_the_model(d2l_cfg, tmp_path, monkeypatch):
    from posttrain.algos.d2l import api
    from posttrain.algos.d2l.teacher import teacher_topk
    from posttrain.algos.d2l.trainer import D2LTrainer

    monkeypatch.setattr(D2LTrainer, "_move_model_to_device", lambda self, model, device: model.to(MOVED))
    seen: list[torch.dtype] = []
    _watch_models(monkeypatch, seen)
    cfg = d2l_cfg(
        "algo.kl_coef=0.5",
        "algo.kl_top_k=4",
        "data.num_train=4",
        "trainer.max_steps=1",
        "trainer.per_device_batch_size=4",
        "trainer.progress_bar=false",
    )
    trainer = api.build_trainer(cfg, tmp_path)
    model = trainer.model
    assert next(model.base.parameters()).dtype == MOVED  # the Trainer's (fake) move happened
    assert seen and set(seen) == {MOVED}, seen  # ...and every teacher forward ran after it
    rows = trainer.train_dataset.rows
    again = teacher_topk(model, rows, 4)  # the cache holds the placed model's numbers
    assert all(torch.equal(r["t_idx"], i) and torch.equal(r["t_logp"], lp) for r, (i, lp) in zip(rows, again))
    trainer.train()  # one step on the moved model: no dtype mismatch between cache, batch and model
    assert trainer.state.global_step == 1 and trainer.state.log_history[0]["kl_loss"] >= 0


def test_load_d2l_and_eval_place_the_model_on_the_configured_device(d2l_cfg, d2l_model, tmp_path, monkeypatch):
    from posttrain.algos.d2l import api

    ckpt = tmp_path / "ckpt"
    trained = d2l_model()
    with torch.no_grad():
        trained.hypernet.scale_B.normal_(0, 1.0)
    trained.save_hypernet(ckpt)
    monkeypatch.setattr(api, "device_for", lambda cfg: MOVED, raising=False)  # "the configured device"
    seen: list[torch.dtype] = []
    _watch_models(monkeypatch, seen)
    cfg = d2l_cfg("algo.max_new_tokens=2", "algo.eval_batch_size=4")
    model = api.load_d2l(cfg, ckpt)
    assert {p.dtype for p in model.parameters()} == {MOVED}
    seen.clear()
    (tmp_path / "eval").mkdir()
    out = api.evaluate(cfg, tmp_path / "eval", ckpt)
    assert seen and set(seen) == {MOVED}, seen
    assert all(out["eval"][c]["answer_loss"] == out["eval"][c]["answer_loss"] for c in ("d2l", "in_context"))


def test_device_for_follows_the_hardware_profile(d2l_cfg):
    from posttrain.algos.d2l.api import device_for

    assert device_for(d2l_cfg("hw=cpu")).type == "cpu"
