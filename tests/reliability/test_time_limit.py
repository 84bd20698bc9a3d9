"""`trainer.max_time_s`: a run past its wall-clock budget stops at the step it is on, saves that step's checkpoint,
still writes its summary, and `resume=auto` finishes the schedule."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import TrainerControl, TrainerState

from posttrain.callbacks.time_limit import WallClockLimit
from tests.reliability.helpers import compose, leg, metrics


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _step(cb: WallClockLimit, step: int, max_steps: int = 10) -> TrainerControl:
    state, control = TrainerState(global_step=step, max_steps=max_steps), TrainerControl()
    cb.on_step_end(SimpleNamespace(), state, control)
    return control


def test_stops_and_saves_at_the_first_step_past_the_budget():
    clock = _Clock()
    cb = WallClockLimit(30, clock=clock)
    cb.on_train_begin(SimpleNamespace(), TrainerState(), TrainerControl())
    clock.now += 29.9
    ctl = _step(cb, 3)
    assert not ctl.should_training_stop and not ctl.should_save and cb.stopped_at is None
    clock.now += 0.1
    ctl = _step(cb, 4)
    assert ctl.should_training_stop and ctl.should_save and ctl.should_log and cb.stopped_at == 4


def test_the_last_step_is_left_to_the_trainer():
    clock = _Clock()
    cb = WallClockLimit(1, clock=clock)
    cb.on_train_begin(SimpleNamespace(), TrainerState(), TrainerControl())
    clock.now += 5
    ctl = _step(cb, 10, max_steps=10)  # the run ends here anyway: no stop to report
    assert not ctl.should_training_stop and cb.stopped_at is None


def test_a_run_out_of_time_checkpoints_and_resume_finishes(tmp_path, capsys, monkeypatch):
    from posttrain.callbacks import time_limit

    clock = _Clock()

    def tick() -> float:  # a second per reading: training begins at 0, step 1 ends at 1, step 2 at 2
        clock.now += 1
        return clock.now

    monkeypatch.setattr(time_limit, "time", SimpleNamespace(monotonic=tick))
    run = tmp_path / "run"
    over = ("trainer.max_steps=5", "trainer.save_steps=0", "trainer.logging_steps=3")
    summary = leg(compose("d2l", run, *over, "trainer.max_time_s=1.5"))
    assert summary["stopped_by_max_time_s"] == 2 and summary["final_step"] == 2
    assert "trainer.max_time_s=1.5 reached: stopping at step 2 of 5" in capsys.readouterr().out
    assert (run / "checkpoints" / "checkpoint-2" / "COMPLETE").is_file()
    assert [m["step"] for m in metrics(run)] == [1, 2]  # step 2 logged although logging_steps=3

    monkeypatch.undo()
    summary = leg(compose("d2l", run, *over, "resume=auto"))
    assert "stopped_by_max_time_s" not in summary
    assert [m["step"] for m in metrics(run)] == [1, 2, 3]  # HF logs multiples of logging_steps; step 5 is not one
    assert summary["final_step"] == 5  # the step training ended at, not the last one logged
    assert (run / "checkpoints" / "checkpoint-5" / "COMPLETE").is_file()


def test_stop_step_repeats_a_run_the_clock_stopped(tmp_path, monkeypatch):
    """The same steps with the same learning rates and losses: the schedule spans max_steps in both."""
    from posttrain.callbacks import time_limit

    clock = _Clock()

    def tick() -> float:
        clock.now += 1
        return clock.now

    over = ("trainer.max_steps=5", "trainer.save_steps=0", "trainer.logging_steps=1", "trainer.lr_scheduler=cosine")
    monkeypatch.setattr(time_limit, "time", SimpleNamespace(monotonic=tick))
    timed = leg(compose("d2l", tmp_path / "timed", *over, "trainer.max_time_s=1.5"))
    monkeypatch.undo()
    stepped = leg(compose("d2l", tmp_path / "stepped", *over, "trainer.stop_step=2"))
    assert stepped["stopped_by_stop_step"] == 2 and timed["stopped_by_max_time_s"] == 2
    assert (tmp_path / "stepped" / "checkpoints" / "checkpoint-2" / "COMPLETE").is_file()
    rows = [[(m["step"], m["learning_rate"], m["loss"]) for m in metrics(tmp_path / r)] for r in ("timed", "stepped")]
    assert rows[0] == rows[1] and len(rows[0]) == 2
    assert rows[0][1][1] > 0.5 * rows[0][0][1]  # step 2 of a 5-step cosine, not the end of a 2-step one


def test_stop_step_at_or_past_the_schedule_is_refused():
    import pytest

    from posttrain.config.compose import load_config
    from posttrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stop_step=5 must be below trainer\.max_steps=5"):
        load_config(["algo=d2l", "trainer.max_steps=5", "trainer.stop_step=5"])
    assert load_config(["algo=d2l", "trainer.max_steps=5", "trainer.stop_step=4"]).trainer.stop_step == 4
