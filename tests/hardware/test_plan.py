"""The memory plan: must-show verdicts, the JSON line of `mode=plan`, and each term of the model."""

from __future__ import annotations

import json

import pytest

from posttrain.hardware import apply_profile, plan, plan_summary
from posttrain.hardware.memory import GIB
from tests.conftest import ROOT, run_train

MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
KEYS = ("params_total", "params_active", "params_trainable", "peak_gib", "device_gib", "fits", "suggestion")


def _summary(compose, *overrides):
    cfg = compose(*overrides)
    apply_profile(cfg, overrides=set())
    return plan_summary(cfg)[1]


def test_gpt_oss_grpo_does_not_fit_rtx4090_with_suggestion(compose):
    s = _summary(compose, "model=gpt_oss", "algo=grpo", "hw=rtx4090")
    assert s["fits"] is False and s["peak_gib"] > 24
    assert "hw=h200" in s["suggestion"]


def test_gpt_oss_grpo_fits_h200(compose):
    s = _summary(compose, "model=gpt_oss", "algo=grpo", "hw=h200")
    assert s["fits"] is True and s["suggestion"] == ""
    assert 39 < s["peak_gib"] < 80  # bf16 weights alone are 39 GiB


def test_llama_1b_grpo_fits_rtx4090(compose):
    s = _summary(compose, "model=llama3_2_1b", "algo=grpo", "hw=rtx4090")
    assert s["fits"] is True and s["suggestion"] == ""


def test_suggestion_is_a_working_change(compose):
    """Full fine-tuning of Llama-3.1-8B on one A100-40GB: the suggested overrides must themselves fit."""
    base = ("model=llama3_1_8b", "hw=a100_40gb", "model.lora.enabled=false", "algo.beta=0")
    s = _summary(compose, *base)
    assert not s["fits"] and s["suggestion"].startswith("try: ")
    overrides = s["suggestion"].removeprefix("try: ").split(" (peak")[0].split()
    again = _summary(compose, *base, *overrides)
    assert again["fits"], (overrides, again["peak_gib"])


@pytest.mark.parametrize("hw", ["rtx4090", "cpu"])
def test_suggested_kernel_is_fused_not_liger(compose, hw):
    """Logits that do not fit: the suggestion is our `fused` kernel (faster than Liger's bf16-softmax loss,
    experiments/kernels), on GPU and CPU profiles alike; the change alone makes the plan fit."""
    base = ("model=llama3_2_1b", f"hw={hw}", "kernels=eager", "algo.max_completion_length=2048", "hw.device_gib=24")
    s = _summary(compose, *base)
    assert not s["fits"] and s["suggestion"].startswith("try: kernels=fused ") and "liger" not in s["suggestion"]
    overrides = s["suggestion"].removeprefix("try: ").split(" (peak")[0].split()
    assert _summary(compose, *base, *overrides)["fits"]


@pytest.mark.parametrize("model", MODELS)
def test_every_model_plans_offline(compose, model):
    s = _summary(compose, f"model={model}")
    assert all(k in s for k in KEYS) and s["params_total"] > 0 and s["params_active"] <= s["params_total"]


def test_plan_command_last_line_is_json_exit_0():
    proc = run_train("model=gpt_oss", "algo=grpo", "hw=rtx4090", "mode=plan", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    data = json.loads(lines[-1])
    assert data["fits"] is False and data["suggestion"]
    assert any("peak" in line for line in lines[:-1])  # the table precedes the JSON


def _item(result, name):
    return next(i.bytes for i in result.items if i.name == name)


def test_contrastive_batch_counts_three_views(compose):
    from posttrain.algos.registry import get_algorithm

    cfg = compose("model=llama3_2_1b", "algo=contrastive", "algo.max_length=128")
    w = get_algorithm("contrastive").workload(cfg)
    assert w.seqs == 3 * cfg.trainer.per_device_batch_size
    # the LM loss reads the benign and the injected rows (two of three views), the paraphrase only on request
    assert w.logit_tokens == 128 * 2 // 3
    on_cf = compose("model=llama3_2_1b", "algo=contrastive", "algo.max_length=128", "algo.lm_on_counterfactual=true")
    assert get_algorithm("contrastive").workload(on_cf).logit_tokens == 128


def test_activation_terms(compose):
    off = ("model=llama3_2_3b", "hw=a100", "model.gradient_checkpointing=false", "hw.gradient_checkpointing=false")
    base = plan(compose(*off))
    gc = plan(compose("model=llama3_2_3b", "hw=a100", "model.gradient_checkpointing=true"))
    assert _item(gc, "activations") < _item(base, "activations") / 4
    cfg = compose(*off)
    prompt, completion = cfg.algo.max_prompt_length, cfg.algo.max_completion_length
    longer = plan(compose(*off, f"algo.max_completion_length={completion + 128}"))
    ratio = (prompt + completion + 128) / (prompt + completion)
    assert _item(longer, "activations") == pytest.approx(_item(base, "activations") * ratio, rel=0.01)


def test_logits_depend_on_kernels(compose):
    eager = plan(compose("model=gpt_oss", "hw=h200", "kernels=eager"))
    cfg = compose("model=gpt_oss", "hw=h200")
    t = cfg.algo.max_completion_length + 1
    n = cfg.trainer.per_device_batch_size * t  # completions x (completion tokens + 1)
    assert _item(eager, "logits") >= n * 201088 * 4  # at least one fp32 [tokens, V]
    for backend in ("trl", "chunked", "liger", "fused"):
        other = plan(compose("model=gpt_oss", "hw=h200", f"kernels={backend}"))
        assert _item(other, "logits") < _item(eager, "logits") / 4, backend
    # TRL's tiles are [4096 tokens, 32768 vocab]: past 4096 tokens the logits term stops growing
    big = plan(compose("model=gpt_oss", "hw=h200", "kernels=trl", "trainer.per_device_batch_size=512"))
    bigger = plan(compose("model=gpt_oss", "hw=h200", "kernels=trl", "trainer.per_device_batch_size=1024"))
    tile = 4096 * 32768 * 2
    assert _item(bigger, "logits") - _item(big, "logits") == pytest.approx(512 * t * 2880 * 4)
    assert _item(big, "logits") >= 2 * tile


def test_reference_copy_only_for_full_finetune_with_kl(compose):
    lora = plan(compose("model=llama3_2_1b", "hw=a100", "algo.beta=0.04"))
    full = plan(compose("model=llama3_2_1b", "hw=a100", "algo.beta=0.04", "model.lora.enabled=false"))
    no_kl = plan(compose("model=llama3_2_1b", "hw=a100", "algo.beta=0", "model.lora.enabled=false"))
    names = lambda p: {i.name for i in p.items}
    assert "reference model" not in names(lora) and "reference model" not in names(no_kl)
    assert _item(full, "reference model") == pytest.approx(1.2358144e9 * 2)


def test_rollout_copy_counts_its_bf16_and_packed_weights(compose):
    default = plan(compose("model=llama3_2_1b", "hw=cpu", "hw.precision=bf16"))
    rollout = plan(compose("model=llama3_2_1b", "hw=cpu", "hw.precision=bf16", "algo.generation.backend=bf16_copy"))
    assert "rollout copy" not in {i.name for i in default.items}
    assert _item(rollout, "rollout copy") == pytest.approx(1.2358144e9 * 2 * 2)
    assert rollout.peak_bytes > default.peak_bytes


def test_weights_quantization_and_optimizer(compose):
    bf16 = plan(compose("model=gpt_oss", "hw=h200"))
    assert _item(bf16, "weights") / GIB == pytest.approx(20.914757184e9 * 2 / GIB, rel=0.01)  # MXFP4 -> bf16
    q = plan(compose("model=llama3_1_8b", "hw=a100", "model.quantization=bnb4"))
    dense = plan(compose("model=llama3_1_8b", "hw=a100"))
    assert _item(q, "weights") < 0.45 * _item(dense, "weights")
    full = plan(compose("model=llama3_2_1b", "hw=a100", "model.lora.enabled=false"))
    assert _item(full, "optimizer states") == pytest.approx(1.2358144e9 * 4)  # 2 bf16 moments
    eight = plan(compose("model=llama3_2_1b", "hw=a100", "model.lora.enabled=false", "hw.optimizer=paged_adamw_8bit"))
    assert _item(eight, "optimizer states") == pytest.approx(1.2358144e9 * 2)


def test_generation_kv_cache_and_vllm(compose):
    args = ("model=gpt_oss", "hw=h200", "trainer.grad_accum=2", "trainer.per_device_batch_size=16")
    cfg = compose(*args)
    seq = cfg.algo.max_prompt_length + cfg.algo.max_completion_length
    hf = plan(cfg)
    a = 2 * 8 * 64 * 2  # K and V, 8 kv heads x 64, bf16
    sliding, full = 12 * min(seq, 128), 12 * seq  # sliding layers keep the 128-token window
    assert _item(hf, "KV cache") == pytest.approx(32 * (sliding + full) * a)  # 16 x 2 sequences
    vllm = plan(compose("model=gpt_oss", "hw=h200", "algo.generation.backend=vllm"))
    assert _item(vllm, "vLLM (colocated)") == pytest.approx(0.3 * 140.4 * GIB)


def test_plan_counts_extra_trainable_parameters_from_the_modules(compose):
    """The D2L hypernet and the contrastive head are counted from the modules the run builds (issue 12 item 16:
    the old estimate said 1.57M for the gpt_oss hypernet, which has 32.2M parameters)."""
    from posttrain.algos.contrastive.api import build_model as build_contrastive
    from posttrain.algos.d2l import build_model as build_d2l
    from posttrain.algos.registry import get_algorithm

    d2l = compose("algo=d2l", "model=tiny_llama")
    built = build_d2l(d2l)
    assert get_algorithm("d2l").workload(d2l).extra_trainable == sum(p.numel() for p in built.hypernet.parameters())
    assert sum(p.numel() for p in built.parameters() if p.requires_grad) == sum(
        p.numel() for p in built.hypernet.parameters()
    )
    con = compose("algo=contrastive", "model=tiny_llama")
    head = build_contrastive(con).head
    assert get_algorithm("contrastive").workload(con).extra_trainable == sum(p.numel() for p in head.parameters())
    big = get_algorithm("d2l").workload(compose("algo=d2l", "model=gpt_oss", "hw=h200")).extra_trainable
    assert 32.0e6 < big < 32.4e6
