"""D2L model lessons: zero-init update, per-sample application through the base layer's own forward, frozen base,
hypernet gradients, gradient checkpointing delegation, shapes from config, pickle-free save -> load."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posttrain.algos.d2l.batching import D2LCollator
from posttrain.algos.d2l.encoder import backbone_of
from posttrain.algos.d2l.lora import D2LLinear, GeneratedLoRA
from posttrain.algos.d2l.loss import d2l_loss
from posttrain.data.d2l import d2l_records, featurize

DOCS = ["Bazoru lives in Oslo. Bazoru likes teal.", "Kimelo owns a fox. Kimelo eats figs."]


def _batch(model, cfg, n=4):
    records = d2l_records(cfg.data)[0][:n]
    rows = [featurize(r, model.tokenizer, cfg.algo.max_length, cfg.algo.encoder.max_doc_length) for r in records]
    return D2LCollator(model.tokenizer.pad_token_id)(rows)


def _logits(model, ids, mask):
    return model.base(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _randomize_scalers(model):
    with torch.no_grad():
        model.hypernet.scale_B.normal_(0, 1.0)


def test_generated_lora_changes_no_logits_at_init(d2l_cfg, d2l_model):
    cfg = d2l_cfg()
    model = d2l_model()
    batch = _batch(model, cfg)
    model.reset()
    base = _logits(model, batch["input_ids"], batch["attention_mask"])
    lora = model.lora_from_ids(batch["ctx_ids"], batch["ctx_mask"])
    assert all(float(b.detach().abs().max()) == 0.0 for b in lora.B.values())  # B scaler starts at 0
    assert all(float(a.detach().abs().max()) > 0.0 for a in lora.A.values())  # ...but A does not: gradients can flow
    model.apply_lora(lora)
    assert torch.equal(_logits(model, batch["input_ids"], batch["attention_mask"]), base)
    _randomize_scalers(model)  # the test can fail: a non-zero B does change the logits
    model.apply_lora(model.lora_from_ids(batch["ctx_ids"], batch["ctx_mask"]))
    assert (_logits(model, batch["input_ids"], batch["attention_mask"]) - base).abs().max() > 1e-3
    model.reset()
    assert torch.equal(_logits(model, batch["input_ids"], batch["attention_mask"]), base)


def test_per_sample_padded_and_packed_application(d2l_model):
    model = d2l_model()
    _randomize_scalers(model)
    lora = model.internalize(DOCS)
    prompts = ["Where does Bazoru live?", "What pet does Kimelo own?"]
    ids = [model.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    singles = []
    for i, x in enumerate(ids):
        model.apply_lora(lora.select([i]))
        singles.append(model.base(input_ids=torch.tensor([x]), use_cache=False).logits[0])
    width = max(map(len, ids))
    pad = model.tokenizer.pad_token_id
    padded = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
    model.apply_lora(lora)
    out = model.base(input_ids=padded, attention_mask=mask, use_cache=False).logits
    for i, x in enumerate(ids):
        torch.testing.assert_close(out[i, : len(x)], singles[i], atol=1e-5, rtol=1e-5)
    # the same LoRAs as one packed row: each token uses its own segment's LoRA (checked on a single linear layer)
    wrapper = next(iter(model.wrappers.values()))
    x = torch.randn(1, 7, wrapper.in_features)
    index = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    path = next(iter(model.wrappers))
    wrapper.lora_A, wrapper.lora_B, wrapper.token_index = lora.A[path], lora.B[path], index
    packed = wrapper(x)
    wrapper.token_index = None
    for seg, cols in ((0, slice(0, 3)), (1, slice(3, 7))):
        wrapper.lora_A, wrapper.lora_B = lora.A[path][seg : seg + 1], lora.B[path][seg : seg + 1]
        torch.testing.assert_close(packed[:, cols], wrapper(x[:, cols]), atol=1e-5, rtol=1e-5)
    model.reset()
    assert all(w.lora_A is None for w in model.wrappers.values())


class _QuantLikeLinear(nn.Linear):
    """Stands in for a quantized subclass: its own forward must be the one that runs."""

    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return super().forward(x) + 1.0


def test_lora_calls_the_wrapped_layers_own_forward():
    base = _QuantLikeLinear(8, 6)
    wrapper = D2LLinear(base, scaling=2.0)
    x = torch.randn(2, 3, 8)
    A, B = torch.randn(2, 4, 8), torch.randn(2, 4, 6)
    wrapper.lora_A, wrapper.lora_B = A, B
    y = wrapper(x)
    assert _QuantLikeLinear.calls == 1
    expected = nn.functional.linear(x, base.weight, base.bias) + 1.0 + 2.0 * torch.einsum("bti,bri,bro->bto", x, A, B)
    torch.testing.assert_close(y, expected)


def test_frozen_base_and_hypernet_gradients(d2l_cfg, d2l_model):
    cfg = d2l_cfg()
    model = d2l_model()
    batch = _batch(model, cfg)
    loss, stats = d2l_loss(model, batch, l1_coef=0.01)
    loss.backward()
    assert stats["gen_lora_l1_norm"] > 0 and torch.isfinite(loss)
    assert all(not p.requires_grad and p.grad is None for p in model.base.parameters())
    # at init only the B scaler sees the loss (everything upstream is multiplied by it)...
    assert model.hypernet.scale_B.grad.abs().sum() > 0
    model.hypernet.zero_grad()
    _randomize_scalers(model)  # ...once it is non-zero, every part of the hypernet gets a gradient
    loss, _ = d2l_loss(model, batch)
    loss.backward()
    zero = [n for n, p in model.hypernet.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not zero, zero
    assert all(p.grad is None for p in model.base.parameters())


def test_gradient_checkpointing_is_the_base_models(d2l_cfg, d2l_model):
    cfg = d2l_cfg()
    model = d2l_model()
    _randomize_scalers(model)
    batch = _batch(model, cfg)
    model.train()
    loss, _ = d2l_loss(model, batch)
    loss.backward()
    ref = {n: p.grad.clone() for n, p in model.hypernet.named_parameters()}
    model.hypernet.zero_grad()
    model.activation_checkpointing_enable({"use_reentrant": False})
    model.train()
    assert model.base.is_activation_checkpointing and model.is_activation_checkpointing
    loss2, _ = d2l_loss(model, batch)
    loss2.backward()
    torch.testing.assert_close(loss2, loss)
    for n, p in model.hypernet.named_parameters():
        torch.testing.assert_close(p.grad, ref[n], atol=1e-5, rtol=1e-4, msg=n)
    model.activation_checkpointing_disable()
    assert not model.base.is_activation_checkpointing


@pytest.mark.parametrize(
    "overrides, rows",
    [
        ([], 4),
        (["algo.per_rank_gen=false"], 4),
        (["algo.per_layer_processing=false", "algo.encoder.early_exit_layer=1"], 4),
        (["algo.bias_lora_rank=2", "algo.target_modules=[q_proj]", "algo.layers=[1]"], 6),
    ],
)
def test_generated_shapes_follow_the_config(d2l_model, overrides, rows):
    model = d2l_model(*overrides)
    lora = model.internalize(DOCS)
    assert set(lora.A) == set(model.wrappers)
    for path, w in model.wrappers.items():
        assert lora.A[path].shape == (2, rows, w.in_features)
        assert lora.B[path].shape == (2, rows, w.out_features)
    depth = model.spec.encoder_depth
    assert len(model.encoder.backbone.layers) == depth  # trimmed copy...
    assert len(backbone_of(model.base).layers) == 2  # ...the base keeps all its layers


def test_save_load_gives_the_identical_lora(tmp_path, d2l_model):
    model = d2l_model()
    _randomize_scalers(model)
    model.save_hypernet(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hypernet.safetensors", "hypernet_config.json"]
    other = d2l_model()
    with torch.no_grad():  # a differently initialised hypernet (same base)...
        for p in other.hypernet.parameters():
            p.add_(torch.randn_like(p))
    before = other.internalize(DOCS[0])
    other.load_hypernet(tmp_path)  # ...becomes the saved one exactly
    a, b = model.internalize(DOCS[0]), other.internalize(DOCS[0])
    assert not torch.equal(before.A[next(iter(a.A))], a.A[next(iter(a.A))])
    for path in a.A:
        assert torch.equal(a.A[path], b.A[path]) and torch.equal(a.B[path], b.B[path])


def test_training_starts_from_init_hypernet(tmp_path, d2l_model, d2l_cfg):
    """`algo.init_hypernet`: the trainer's hypernet is the saved one (a curriculum's second stage), at step 0."""
    from posttrain.algos.d2l import api

    saved = d2l_model()
    _randomize_scalers(saved)
    saved.save_hypernet(tmp_path / "stage1")
    trainer = api.build_trainer(d2l_cfg(f"algo.init_hypernet={tmp_path / 'stage1'}"), tmp_path / "run")
    fresh = api.build_trainer(d2l_cfg(), tmp_path / "fresh")
    a, b, c = (m.internalize(DOCS[0]) for m in (saved, trainer.model, fresh.model))
    for path in a.A:
        assert torch.equal(a.A[path], b.A[path]) and torch.equal(a.B[path], b.B[path])
    assert not all(torch.equal(a.B[path], c.B[path]) for path in a.B)  # a fresh build differs
    assert trainer.state.global_step == 0


def test_load_refuses_a_different_hypernet(tmp_path, d2l_model):
    from posttrain.errors import CheckpointError

    d2l_model("algo.rank=2").save_hypernet(tmp_path)
    with pytest.raises(CheckpointError, match="rank"):
        d2l_model().load_hypernet(tmp_path)


def test_python_api_internalize_generate_reset(d2l_model):
    model = d2l_model()
    _randomize_scalers(model)
    lora = model.internalize(DOCS[0])
    assert isinstance(lora, GeneratedLoRA) and len(lora) == 1
    plain = model.generate("Where does Bazoru live?", None, max_new_tokens=6)
    with_lora = model.generate("Where does Bazoru live?", lora, max_new_tokens=6)
    assert isinstance(plain, str) and isinstance(with_lora, str)
    assert all(w.lora_A is None for w in model.wrappers.values())  # generate resets after itself
    assert model.generate("Where does Bazoru live?", None, max_new_tokens=6) == plain


def test_batched_generation_uses_each_rows_own_lora(d2l_model):
    model = d2l_model()
    _randomize_scalers(model)
    lora = model.internalize(DOCS)
    prompts = ["Where does Bazoru live?", "What pet does Kimelo own? Tell me."]  # different lengths: left padding
    batched = model.generate(prompts, lora, max_new_tokens=6)
    singles = [model.generate(p, lora.select([i]), max_new_tokens=6) for i, p in enumerate(prompts)]
    assert batched == singles
    swapped = model.generate(prompts, lora.select([1, 0]), max_new_tokens=6)
    assert swapped != batched  # the test can fail: the LoRA does steer generation
