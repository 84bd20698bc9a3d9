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
    stale = [n for n, t in [*enc.named_parameters(), *enc.named_buffers()] if t.is_floating_point() and t.dtype != MOVED]
    assert not stale, f"not moved with the model: {stale}"
    seen, handles = _record_dtypes(list(enc.layers) + [backbone_of(model.base)])
    try:
        hidden, lora = model(batch["ctx_ids"], batch["ctx_mask"], batch["input_ids"], batch["attention_mask"])
    finally:
        for h in handles:
            h.remove()
    assert len(seen) >= len(enc.layers) + 1 and set(seen) == {MOVED}, seen
    assert hidden.dtype == MOVED and all(a.dtype == MOVED for a in lora.A.values())
