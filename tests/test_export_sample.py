"""`mode=export`: the trained LoRA merged into a plain Hugging Face checkpoint that loads without posttrain or PEFT
and gives the adapter model's logits; `mode=sample`: a checkpoint's completions of given prompts."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.config.compose import load_config
from tests.conftest import run_cli

TINY = (
    "trainer.max_steps=2",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=4",
    "trainer.progress_bar=false",
)


def test_export_loads_with_plain_transformers_and_gives_the_adapter_models_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    from posttrain.algos.registry import get_algorithm

    run = tmp_path / "run"
    assert run_cli(*TINY, "trainer.lr=0.05", f"hydra.run.dir={run}").returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    proc = run_cli(*TINY, "mode=export", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = run / "export"
    info = json.loads((out / "export.json").read_text())
    assert info["merged_lora"] and info["checkpoint"].endswith("checkpoint-2")
    assert {p: p.read_bytes() for p in before} == before  # the run's own files are untouched
    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in n for n, _ in plain.named_parameters())
    cfg = load_config(list(TINY))
    adapter, _ = get_algorithm("grpo").trained_lm(cfg, run / "checkpoints" / "checkpoint-2")
    start, _ = get_algorithm("grpo").trained_lm(cfg, None)
    ids = torch.randint(0, plain.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = plain(ids).logits, adapter.eval()(ids).logits
        base = start.eval()(ids).logits
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    assert (want - base).abs().max() > 1e-3  # training moved the adapters: the comparison has teeth


def test_export_refuses_what_is_not_one_language_model(tmp_path):
    proc = run_cli("algo=d2l", "mode=export", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    assert "mode=export: algo=d2l's checkpoint is not a single language model to export" in proc.stderr


def test_sample_prints_the_checkpoints_greedy_completions(tmp_path):
    from posttrain.algos.registry import get_algorithm
    from posttrain.models.generation import generate

    run = tmp_path / "run"
    assert run_cli(*TINY, "trainer.lr=0.05", f"hydra.run.dir={run}").returncode == 0
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the sea\n\nthe sky\n")
    proc = run_cli(*TINY, "mode=sample", f"sample.file={prompts}", "sample.max_new_tokens=6", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith('{"prompt"')]
    assert [r["prompt"] for r in rows] == ["the sea", "the sky"]
    model, tok = get_algorithm("grpo").trained_lm(load_config(list(TINY)), run / "checkpoints" / "checkpoint-2")
    texts, _ = generate(
        model, tok, [[{"role": "user", "content": p}] for p in ("the sea", "the sky")], max_new_tokens=6
    )
    assert [r["completion"] for r in rows] == texts
    proc = run_cli(*TINY, "mode=sample", f"hydra.run.dir={run}")
    assert proc.returncode == 2 and "mode=sample needs prompts" in proc.stderr


@pytest.mark.parametrize("mode", ["export", "sample"])
def test_a_missing_checkpoint_is_one_line(tmp_path, mode):
    proc = run_cli(*TINY, f"mode={mode}", "sample.prompts=[hi]", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and f"error: mode={mode}: no complete checkpoint in" in proc.stderr


def test_a_run_is_read_with_its_own_command_line(tmp_path):
    """`mode=export hydra.run.dir=<run>` alone: the run's overrides (here another model) apply; a key given again
    replaces the run's."""
    run = tmp_path / "run"
    assert run_cli(*TINY, "model=tiny_gpt_oss", f"hydra.run.dir={run}").returncode == 0
    proc = run_cli("mode=export", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        f"{run}: the run's own overrides apply: trainer.max_steps=2" in proc.stdout
        and "model=tiny_gpt_oss" in proc.stdout
    )
    assert json.loads((run / "export" / "export.json").read_text())["base_model"] == "tiny_gpt_oss"
    proc = run_cli("mode=sample", "sample.prompts=[hi]", "sample.max_new_tokens=12", f"hydra.run.dir={run}")
    assert proc.returncode == 0 and '{"prompt": "hi"' in proc.stdout, proc.stderr[-2000:]
