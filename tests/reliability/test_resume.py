"""Exact resume for every algorithm: 2N steps straight == N steps (of a 2N-step run, stopped after its checkpoint)
+ `resume=auto` + N, compared on every checkpointed tensor, the optimizer state, the LR schedule and metrics.jsonl.

The interrupted leg is configured exactly like the straight one (max_steps=2N, linear decay, so a schedule rebuilt
for the wrong length would show in the learning rates) and is stopped by a callback after step N's checkpoint.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.reliability.helpers import compose, leg, metrics, optimizer_state, tensors, trainer_state

N = 2
SCHEDULE = (
    f"trainer.max_steps={2 * N}",
    f"trainer.save_steps={N}",
    "trainer.lr_scheduler=linear",
    "trainer.warmup_steps=0",
)
# logged values that measure the machine, not the training
_TIMING = ("runtime", "per_second", "time", "flos")
# (algo, grad_accum, extra overrides): GRPO both ways and with adaptive beta (its beta must survive the resume),
# the others with accumulation
ADAPTIVE_BETA = ("algo.kl.target=0.01",)
CASES = [("grpo", 1, ()), ("grpo", 2, ()), ("grpo", 2, ADAPTIVE_BETA), ("contrastive", 2, ()), ("d2l", 2, ())]


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not any(t in k for t in _TIMING)}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: faster and deterministic on a shared 2-core box
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "grad_accum", "extra"), CASES, ids=[f"{a}-ga{g}" + ("-adaptive-beta" if e else "") for a, g, e in CASES]
)
def test_straight_equals_interrupted_plus_resume(algo, grad_accum, extra, tmp_path, capsys):
    over = (*SCHEDULE, f"trainer.grad_accum={grad_accum}", *extra)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    leg(compose(algo, straight, *over))
    leg(compose(algo, resumed, *over), stop_at=N)
    assert (resumed / "checkpoints" / f"checkpoint-{N}" / "COMPLETE").is_file()
    assert not (resumed / "checkpoints" / f"checkpoint-{2 * N}").exists()
    assert [m["step"] for m in metrics(resumed)] == list(range(1, N + 1))
    capsys.readouterr()
    leg(compose(algo, resumed, *over, "resume=auto"))
    assert f"resume=auto: resuming from {resumed / 'checkpoints' / f'checkpoint-{N}'}" in capsys.readouterr().out

    a_ckpt, b_ckpt = straight / "checkpoints" / f"checkpoint-{2 * N}", resumed / "checkpoints" / f"checkpoint-{2 * N}"
    # parameters: every checkpointed tensor (adapters, heads, hypernetwork) bit for bit, and training moved them
    a, b = tensors(a_ckpt), tensors(b_ckpt)
    assert a and a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    first = tensors(straight / "checkpoints" / f"checkpoint-{N}")
    assert any(not torch.equal(first[k], a[k]) for k in a), "nothing trained between step N and 2N"

    # optimizer state (loaded as an untrusted file: weights_only) and the scheduler
    oa, ob = optimizer_state(a_ckpt), optimizer_state(b_ckpt)
    assert oa["state"].keys() == ob["state"].keys() and len(oa["state"]) > 0
    for idx, sa in oa["state"].items():
        for name, value in sa.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(ob["state"][idx][name])), (idx, name)
    assert {float(s["step"]) for s in ob["state"].values()} == {float(2 * N)}  # 2N optimizer steps, not 2N+N
    assert [g["lr"] for g in oa["param_groups"]] == [g["lr"] for g in ob["param_groups"]]
    for ckpt in (a_ckpt, b_ckpt):
        assert torch.load(ckpt / "scheduler.pt", weights_only=True)["last_epoch"] == 2 * N
        assert trainer_state(ckpt)["global_step"] == 2 * N

    # metrics.jsonl: each step once, in order, with the same values (loss, LR, rewards, grad norm...)
    ma, mb = metrics(straight), metrics(resumed)
    assert [m["step"] for m in ma] == [m["step"] for m in mb] == list(range(1, 2 * N + 1))
    for ra, rb in zip(ma, mb):
        ca, cb = _comparable(ra), _comparable(rb)
        assert ca.keys() == cb.keys(), ra["step"]
        bad = {k: (ca[k], cb[k]) for k in ca if not _same(ca[k], cb[k])}
        assert not bad, (ra["step"], bad)
    lrs = [m["learning_rate"] for m in ma]
    assert all(x > y for x, y in zip(lrs, lrs[1:])), lrs  # a decaying schedule: a wrong one would show
    assert all(math.isfinite(m["loss"]) for m in ma)
    if extra == ADAPTIVE_BETA:  # the controller moved beta at every step, so a beta reset on resume would show
        betas = [m["beta"] for m in ma]
        assert all(a != b for a, b in zip(betas, betas[1:])), betas
