"""Resume exactness: 2N straight == N + resume=auto + N (adapters, head, logged losses), optimizer steps and LR
schedule with gradient accumulation whatever the resume point, and checkpoints that refuse to lose the head."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from posttrain.algos.contrastive.api import build_trainer
from posttrain.algos.contrastive.checkpoint import ADAPTER_FILE, HEAD_FILE
from posttrain.callbacks import JsonlMetricsCallback, read_metrics
from posttrain.checkpoints import check_run_identity
from posttrain.errors import CheckpointError
from posttrain.hardware import apply_profile
from posttrain.run import run
from tests.algos.contrastive.helpers import TINY
from tests.conftest import run_cli
from tests.reliability.helpers import StopAt

# a trained head (algo.train_head=true), so that resuming must restore it too
SCHEDULE = (
    "trainer.grad_accum=2",
    "trainer.lr_scheduler=linear",
    "trainer.warmup_steps=2",
    "trainer.max_steps=6",
    "algo.train_head=true",
)


def _interrupted(compose, run_dir: Path, stop_at: int, *overrides: str) -> None:
    cfg = compose(*TINY, *overrides, run_dir=run_dir)
    apply_profile(cfg, overrides=set())  # as `run` trains it (attention, kernels, precision from hw=cpu)
    check_run_identity(run_dir, {"model": cfg.model.name, "algo": cfg.algo.name, "data": cfg.data.name}, None)
    transformers.set_seed(cfg.seed)
    trainer = build_trainer(cfg, run_dir, callbacks=[JsonlMetricsCallback(run_dir / "metrics.jsonl"), StopAt(stop_at)])
    trainer.train()
    assert trainer.state.global_step == stop_at


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return {
        **load_file(str(ckpt / ADAPTER_FILE)),
        **{f"head.{k}": v for k, v in load_file(str(ckpt / HEAD_FILE)).items()},
    }


def _losses(run_dir: Path) -> list[tuple]:
    return [
        (m["step"], m["loss"], m["inv"], m["kl"], m["lm_loss"], m["learning_rate"])
        for m in read_metrics(run_dir / "metrics.jsonl")
    ]


def test_resume_is_exact_for_adapters_head_and_losses(compose, tmp_path, capsys):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(compose(*TINY, *SCHEDULE, "trainer.save_steps=3", run_dir=straight))
    _interrupted(compose, resumed, 3, *SCHEDULE, "trainer.save_steps=3")
    assert not (resumed / "checkpoints" / "checkpoint-6").exists()
    capsys.readouterr()
    run(compose(*TINY, *SCHEDULE, "trainer.save_steps=3", "resume=auto", run_dir=resumed))
    out = capsys.readouterr().out
    assert f"resuming from {resumed / 'checkpoints' / 'checkpoint-3'}" in out
    assert json.loads(out.strip().splitlines()[-1])["logged_steps"] == 6  # 3 kept + 3 new, none re-run twice

    a, b = _weights(straight / "checkpoints" / "checkpoint-6"), _weights(resumed / "checkpoints" / "checkpoint-6")
    assert a.keys() == b.keys() and any(k.startswith("head.") for k in a) and any("lora_B" in k for k in a)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    # training moved both adapters and head (the comparison is not between two untouched inits)
    assert any(float(v.abs().max()) > 0 for k, v in a.items() if "lora_B" in k)
    losses = _losses(straight)
    assert [s for s, *_ in losses] == list(range(1, 7))
    assert losses == _losses(resumed)
    state = json.loads((resumed / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6


@pytest.mark.slow
def test_a_resume_that_drops_the_head_is_caught(compose, tmp_path, monkeypatch):
    """Negative control for the exactness test: re-initialising the head on resume changes the result."""
    import posttrain.algos.contrastive.trainer as trainer_mod

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run(compose(*TINY, *SCHEDULE, "trainer.save_steps=3", run_dir=straight))
    (broken / "checkpoints").mkdir(parents=True)
    shutil.copytree(straight / "checkpoints" / "checkpoint-3", broken / "checkpoints" / "checkpoint-3")
    original = trainer_mod.load_weights

    def adapters_only(model, ckpt, cfg):
        original(model, ckpt, cfg)
        with torch.no_grad():
            for p in model.head.parameters():
                p.normal_(0, 0.1)

    monkeypatch.setattr(trainer_mod, "load_weights", adapters_only)
    run(compose(*TINY, *SCHEDULE, "trainer.save_steps=3", "resume=auto", run_dir=broken))
    a, b = _weights(straight / "checkpoints" / "checkpoint-6"), _weights(broken / "checkpoints" / "checkpoint-6")
    assert not all(torch.equal(a[k], b[k]) for k in a if k.startswith("head."))


def test_grad_accum_steps_and_lr_schedule_whatever_the_resume_point(compose, tmp_path, capsys):
    over = (
        "trainer.grad_accum=3",
        "trainer.lr_scheduler=linear",
        "trainer.warmup_steps=1",
        "trainer.max_steps=4",
        "trainer.save_steps=1",
        "trainer.save_total_limit=null",
        "algo.train_head=true",
    )
    straight = tmp_path / "straight"
    run(compose(*TINY, *over, run_dir=straight))
    ref_lr = {m["step"]: m["learning_rate"] for m in read_metrics(straight / "metrics.jsonl")}
    assert len(set(ref_lr.values())) == 4  # warmup then linear decay: every step has its own LR
    ref = _weights(straight / "checkpoints" / "checkpoint-4")
    for k in (1, 3):
        rdir = tmp_path / f"from{k}"
        (rdir / "checkpoints").mkdir(parents=True)
        shutil.copytree(straight / "checkpoints" / f"checkpoint-{k}", rdir / "checkpoints" / f"checkpoint-{k}")
        capsys.readouterr()
        run(compose(*TINY, *over, "resume=auto", run_dir=rdir))
        assert f"resuming from {rdir / 'checkpoints' / f'checkpoint-{k}'}" in capsys.readouterr().out
        logged = read_metrics(rdir / "metrics.jsonl")
        assert [m["step"] for m in logged] == list(range(k + 1, 5))  # 4 - k optimizer steps in this leg
        assert all(m["learning_rate"] == ref_lr[m["step"]] for m in logged)
        final = rdir / "checkpoints" / "checkpoint-4"
        opt = torch.load(final / "optimizer.pt", weights_only=True)
        steps = {float(s["step"]) for s in opt["state"].values()}
        assert steps == {4.0}  # every trained tensor (adapters and head) stepped max_steps times in total
        n_head = len(load_file(str(final / HEAD_FILE)))
        assert len(opt["state"]) == len(load_file(str(final / ADAPTER_FILE))) + n_head
        assert torch.load(final / "scheduler.pt", weights_only=True)["last_epoch"] == 4
        got = _weights(final)
        assert all(torch.equal(ref[key], got[key]) for key in ref)


def test_checkpoint_without_head_is_refused(compose, tmp_path):
    run(compose(*TINY, "trainer.max_steps=1", run_dir=tmp_path / "a"))
    ckpt = tmp_path / "a" / "checkpoints" / "checkpoint-1"
    (ckpt / HEAD_FILE).unlink()
    cfg = compose(*TINY, "trainer.max_steps=2", "resume=auto", run_dir=tmp_path / "a")
    with pytest.raises(CheckpointError, match=f"lacks {HEAD_FILE} \\(listed in its MANIFEST.json\\)"):
        run(cfg)
    # another head shape, or another tiny base (seed), is refused too
    run(compose(*TINY, "trainer.max_steps=1", run_dir=tmp_path / "b"))
    src = tmp_path / "b" / "checkpoints" / "checkpoint-1"
    with pytest.raises(CheckpointError, match="projection head"):
        build_trainer(
            compose(*TINY, "algo.proj_dim=8", f"algo.init_from={src}", run_dir=tmp_path / "c"), tmp_path / "c"
        )
    with pytest.raises(CheckpointError, match="trained on base"):
        build_trainer(compose(*TINY, "seed=1", f"algo.init_from={src}", run_dir=tmp_path / "d"), tmp_path / "d")


@pytest.mark.slow
def test_cli_train_resume_and_eval(tmp_path):
    """`train.py` train, `resume=auto` and `mode=eval` (in this interpreter; tests/test_console.py runs the
    contrastive `python train.py` as a subprocess)."""
    common = [*TINY, "data.num_eval=6", "algo.max_new_tokens=4", f"hydra.run.dir={tmp_path}"]
    first = run_cli(*common, "trainer.max_steps=2", "trainer.save_steps=1")
    assert first.returncode == 0, first.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("asr_heldout_before", "asr_heldout_after", "utility_benign_before", "utility_benign_after"):
        assert key in summary and 0.0 <= summary[key] <= 1.0
    again = run_cli(*common, "trainer.max_steps=3", "resume=auto")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout and (tmp_path / "checkpoints" / "checkpoint-3").is_dir()
    ev = run_cli(*common, "mode=eval")
    assert ev.returncode == 0, ev.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["checkpoint"].endswith("checkpoint-3") and summary["eval"]["n_heldout"] > 0
