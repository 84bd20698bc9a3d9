"""The training terminal (posttrain.callbacks.console): one bar with key numbers, compact lines, end table, plots."""

from __future__ import annotations

import copy
import io
import json
import re
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from posttrain.algos.registry import get_algorithm
from posttrain.callbacks import read_metrics
from posttrain.callbacks.console import ConsoleCallback, ConsoleSpec, duration, summary_table, use_console
from tests.conftest import run_cli, run_train

ALGOS = ("grpo", "d2l", "contrastive")

# one training log record per algorithm, with the keys its trainer logs (TRL GRPO; D2L and contrastive loss terms)
RECORDS = {
    "grpo": {
        "loss": 3.35e-08,
        "grad_norm": 0.46,
        "learning_rate": 0.003,
        "beta": 0.04,
        "num_tokens": 740.0,
        "completions/mean_length": 5.75,
        "reward": 0.41666,
        "reward_std": 0.3689,
        "kl": 0.00060291,
        "entropy": 5.264,
        "step_time": 1.6071,
        "epoch": 0.0039,
        "reward_hist/length/0-0.2": 7,
    },
    "d2l": {
        "loss": 2.5,
        "grad_norm": 1.2,
        "learning_rate": 1e-3,
        "ce_loss": 2.25,
        "gen_lora_l1_norm": 0.031,
        "kl_loss": 0.25,
        "epoch": 0.1,
    },
    "contrastive": {
        "loss": 1.9,
        "grad_norm": 0.7,
        "learning_rate": 1e-4,
        "nce": 1.4,
        "nce_acc": 0.625,
        "sim_pos": 0.8,
        "sim_inj": 0.3,
        "lm_loss": 0.5,
        "epoch": 0.2,
    },
}
LINE = re.compile(r"^step +(\d+)/(\d+)  ")


def console_spec(algo: str) -> ConsoleSpec:
    return ConsoleSpec.of(get_algorithm(algo).console)


def drive(
    callback: ConsoleCallback,
    record: dict,
    max_steps: int = 4,
    logging_steps: int = 2,
    world_zero: bool = True,
    disable_tqdm: bool = False,
) -> list[str]:
    """HF's order of events for `max_steps` steps logging at step 1 and every `logging_steps`; the bar postfixes."""
    args = SimpleNamespace(disable_tqdm=disable_tqdm, logging_steps=logging_steps)
    state, control = TrainerState(max_steps=max_steps, is_world_process_zero=world_zero), TrainerControl()
    callback.on_train_begin(args, state, control)
    postfixes = []
    for step in range(1, max_steps + 1):
        state.global_step = step
        callback.on_step_end(args, state, control)
        if step == 1 or step % logging_steps == 0:
            logs = {**record, "reward": step / 10} if "reward" in record else {**record, "loss": step / 10}
            sent = copy.deepcopy(logs)
            callback.on_log(args, state, control, logs=logs)
            assert logs == sent  # read, never modified: metrics.jsonl gets what it got before
            if callback.bar is not None:
                postfixes.append(callback.bar.postfix)
    callback.on_log(args, state, control, logs={"train_runtime": 5.1, "train_loss": 0.1, "total_flos": 1.0})
    callback.on_train_end(args, state, control)
    return postfixes


@pytest.mark.parametrize("algo", ALGOS)
def test_bar_postfix_and_compact_lines_show_the_algorithms_keys(algo, capsys):
    spec = console_spec(algo)
    out = io.StringIO()
    postfixes = drive(ConsoleCallback(spec, stream=out), RECORDS[algo], max_steps=10, logging_steps=4)
    lines = out.getvalue().splitlines()
    assert [int(LINE.match(line).group(1)) for line in lines] == [1, 4, 8]  # logging_first_step, then every 4
    assert all(LINE.match(line).group(2) == "10" for line in lines)
    assert len(postfixes) == 3
    for postfix, line in zip(postfixes, lines):
        for key, label in spec.show.items():
            if key in RECORDS[algo]:
                assert f"{label}=" in postfix and re.search(rf"  {re.escape(label)} +\S", line), (label, line)
        assert "grad_norm" not in postfix and "grad_norm" not in line and "learning_rate" not in line
    # aligned: every label starts in the same column on every line
    for label in [lab for key, lab in spec.show.items() if key in RECORDS[algo]]:
        assert len({line.index(f"  {label} ") for line in lines}) == 1, (label, lines)
    captured = capsys.readouterr()
    assert "{" not in out.getvalue() + captured.out + captured.err  # no raw dict anywhere, not even the runtime one


def test_grpo_numbers_in_the_postfix_and_the_line():
    out = io.StringIO()
    record = {k: v for k, v in RECORDS["grpo"].items() if k != "reward"}
    cb = ConsoleCallback(console_spec("grpo"), stream=out)
    args = SimpleNamespace(disable_tqdm=False)
    state = TrainerState(max_steps=30, global_step=0, is_world_process_zero=True)
    cb.on_train_begin(args, state, TrainerControl())
    state.global_step = 2
    cb.on_step_end(args, state, TrainerControl())
    cb.on_log(args, state, TrainerControl(), logs={**record, "reward": 0.5729})
    assert cb.bar.n == 2
    assert cb.bar.postfix == "reward=0.5729 kl=0.0006029 len=5.75 s/step=1.607"
    line = out.getvalue().strip()
    assert re.fullmatch(
        r"step  2/30  reward    0\.5729  kl 0\.0006029  len      5\.75  s/step     1\.607  \[0:0\d\]", line
    ), line
    cb.on_train_end(args, state, TrainerControl())


def test_metrics_that_are_off_show_as_off():
    """beta=0: no reference model, `kl`/`kl_p95` are logged as NaN (null in metrics.jsonl); the line, the bar and
    the end table say `off`, not `nan`."""
    out = io.StringIO()
    cb = ConsoleCallback(console_spec("grpo"), stream=out)
    args = SimpleNamespace(disable_tqdm=False)
    state = TrainerState(max_steps=30, global_step=0, is_world_process_zero=True)
    cb.on_train_begin(args, state, TrainerControl())
    state.global_step = 2
    cb.on_log(args, state, TrainerControl(), logs={**RECORDS["grpo"], "kl": float("nan"), "reward": 0.5729})
    assert cb.bar.postfix == "reward=0.5729 kl=off len=5.75 s/step=1.607"
    line = out.getvalue().strip()
    assert re.fullmatch(
        r"step  2/30  reward    0\.5729  kl       off  len      5\.75  s/step     1\.607  \[0:0\d\]", line
    )
    cb.on_train_end(args, state, TrainerControl())
    metrics = [{"step": s, "reward": s / 10, "kl": None} for s in range(1, 11)]  # as read back from metrics.jsonl
    rows = {
        ln.split()[0]: ln.split()[1:]
        for ln in summary_table({"algo": "grpo"}, metrics, console_spec("grpo")).splitlines()[1:]
    }
    assert rows["kl"] == ["off", "off"] and rows["reward"] == ["0.3", "0.8"]
    assert "loss" not in rows  # a trend metric never logged has no row


def test_gradient_checkpointing_prints_no_deprecation_warning_per_step(tmp_path):
    """TRL toggles checkpointing around every generation and scoring pass through transformers' deprecated aliases
    (six FutureWarnings per step before the fix); a GRPO run with checkpointing on shows none of them."""
    import warnings

    from tests.algos.grpo.helpers import make_trainer

    trainer = make_trainer(tmp_path, "model.gradient_checkpointing=true", "trainer.max_steps=2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", category=FutureWarning, append=True)  # every occurrence, not the first
        trainer.train()
    assert trainer.state.global_step == 2 and trainer.args.activation_checkpointing
    assert trainer.accelerator.unwrap_model(trainer.model).is_activation_checkpointing  # on, and re-enabled by TRL
    assert [str(w.message) for w in caught if "checkpointing" in str(w.message)] == []


def test_eval_records_get_a_short_line_of_their_own():
    out = io.StringIO()
    cb = ConsoleCallback(console_spec("d2l"), stream=out)
    state = TrainerState(max_steps=4, global_step=3, is_world_process_zero=True)
    cb.on_log(
        SimpleNamespace(),
        state,
        TrainerControl(),
        logs={"eval_loss": 2.5, "eval_ce_loss": 2.25, "eval_runtime": 1.0, "epoch": 1.0},
    )
    assert out.getvalue() == "eval at step 3  loss 2.5  ce 2.25\n"


def test_without_a_bar_lines_are_still_printed(capsys):
    cb = ConsoleCallback(console_spec("grpo"))
    postfixes = drive(cb, RECORDS["grpo"], disable_tqdm=True)
    assert postfixes == [] and cb.bar is None
    out = capsys.readouterr().out.splitlines()
    assert [int(LINE.match(line).group(1)) for line in out] == [1, 2, 4]


def test_only_rank_zero_prints(capsys):
    out = io.StringIO()
    cb = ConsoleCallback(console_spec("grpo"), stream=out)
    drive(cb, RECORDS["grpo"], world_zero=False)
    captured = capsys.readouterr()
    assert out.getvalue() == "" and captured.out == "" and captured.err == ""


@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_use_console_replaces_hfs_printers(tmp_path, disable_tqdm):
    import torch
    from transformers import PrinterCallback, ProgressCallback, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), disable_tqdm=disable_tqdm, report_to=[], use_cpu=True)
    trainer = Trainer(model=torch.nn.Linear(2, 2), args=args)
    hf_printer = PrinterCallback if disable_tqdm else ProgressCallback
    assert any(isinstance(cb, hf_printer) for cb in trainer.callback_handler.callbacks)
    console = use_console(trainer, {"show": {"loss": "loss"}})
    kinds = [type(cb) for cb in trainer.callback_handler.callbacks]
    assert ProgressCallback not in kinds and PrinterCallback not in kinds
    assert kinds.count(ConsoleCallback) == 1 and console in trainer.callback_handler.callbacks


def test_spec_rejects_unknown_fields_and_defaults_to_loss():
    with pytest.raises(ValueError, match="unknown fields"):
        ConsoleSpec.of({"shwo": {"loss": "loss"}})
    assert dict(ConsoleSpec.of(None).show) == {"loss": "loss"}


def test_summary_table_trends_before_after_and_runtime():
    metrics = [{"step": s, "reward": s / 10, "kl": 0.01 * s} for s in range(1, 11)]
    summary = {
        "algo": "grpo",
        "runtime_s": 83.4,
        "final_step": 10,
        "heldout_acc_before": 0.12,
        "heldout_acc_after": 0.62,
        "eval_before": {"nested": 1},
    }
    table = summary_table(summary, metrics, console_spec("grpo")).splitlines()
    assert table[0] == "summary (grpo)"
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["reward"] == ["0.3", "0.8"]  # mean of steps 1-5, 6-10
    assert rows["kl"] == ["0.03", "0.08"]
    assert rows["heldout_acc"] == ["0.12", "0.62", "+0.5"]
    assert rows["runtime"] == ["1", "min", "23", "s", "10", "steps"]
    assert [duration(s) for s in (47.44, 83.4, 7501)] == ["47.4 s", "1 min 23 s", "2 h 05 min"]
    without = summary_table({"algo": "grpo", "runtime_s": 1.0}, metrics, console_spec("grpo"))
    assert "before" not in without and "heldout" not in without


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_run_plots_one_panel_per_logged_metric(tmp_path):
    from posttrain.analysis.plots import write_run_plots

    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1 / s, "ce_loss": 0.5 / s}) + "\n" for s in range(1, 6))
    )
    written = write_run_plots(tmp_path, {"loss.png": ("loss", "ce_loss", "kl_loss"), "reward.png": ("reward",)})
    assert written == [tmp_path / "plots" / "loss.png"]  # kl_loss never logged: 2 panels; reward.png: nothing
    assert png_size(written[0]) == (2 * 550, 360)


def test_train_py_terminal_summary_and_plots(tmp_path):
    """`python train.py`: compact lines at steps 1, 2, 4, no printed dicts, the end table, plots/reward.png."""
    run = tmp_path / "run"
    proc = run_train("trainer.max_steps=4", "trainer.logging_steps=2", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    steps = [int(m.group(1)) for m in map(LINE.match, out) if m]
    assert steps == [1, 2, 4], proc.stdout
    assert all(" reward " in line and " kl " in line for line in out if LINE.match(line))
    assert "{'" not in proc.stdout + proc.stderr  # neither HF's ProgressCallback nor PrinterCallback dicts
    summary = json.loads((run / "summary.json").read_text())
    table = out[out.index("summary (grpo)") :]
    rows = {line.split()[0]: line.split()[1:] for line in table[1:] if line.startswith("  ")}
    assert rows["reward"][:2] == [f"{summary['reward_first5_mean']:.4g}", f"{summary['reward_last5_mean']:.4g}"]
    assert "kl" in rows and " ".join(rows["runtime"]) == f"{duration(summary['runtime_s'])} 4 steps"
    assert json.loads(out[-1])["run_dir"] == str(run)  # the JSON line stays last
    assert png_size(run / "plots" / "reward.png") == (3 * 550, 360)  # reward, kl, completion length
    metrics = read_metrics(run / "metrics.jsonl")  # the full records, as before
    assert [m["step"] for m in metrics] == [1, 2, 4]
    for m in metrics:
        assert {
            "loss",
            "grad_norm",
            "learning_rate",
            "reward",
            "reward_std",
            "kl",
            "entropy",
            "step_time",
            "completions/mean_length",
            "num_tokens",
            "epoch",
        } <= set(m)


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,overrides,label",
    [
        ("d2l", ("algo=d2l", "data=d2l_synth", "data.num_train=16", "data.num_eval=0", "algo.eval_at_end=false"), "ce"),
        (
            "contrastive",
            (
                "algo=contrastive",
                "data=contrastive_injection",
                "data.num_train=64",
                "data.num_eval=0",
                "trainer.per_device_batch_size=2",
            ),
            "inv",  # the invariance term of the default objective
        ),
    ],
)
def test_train_py_terminal_for_loss_algorithms(tmp_path, algo, overrides, label):
    """D2L and contrastive: their loss terms in the compact lines and the table, plots/loss.png (in this interpreter:
    the subprocess check of what reaches the terminal is the GRPO test above)."""
    run = tmp_path / "run"
    proc = run_cli(*overrides, "trainer.max_steps=4", "trainer.logging_steps=2", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if LINE.match(line)]
    assert [int(LINE.match(line).group(1)) for line in lines] == [1, 2, 4], proc.stdout
    assert all(" loss " in line and f" {label} " in line for line in lines), lines
    assert "{'" not in proc.stdout + proc.stderr and f"summary ({algo})" in proc.stdout
    assert png_size(run / "plots" / "loss.png")[1] == 360


def test_the_end_table_shows_an_algorithms_result_columns():
    """D2L's evaluation conditions were missing from the end table: `results` names them, one row per condition."""
    from posttrain.algos.registry import get_algorithm
    from posttrain.callbacks.console import ConsoleSpec, summary_table

    summary = {
        "algo": "d2l",
        "eval_no_context_accuracy": 0.1,
        "eval_no_context_answer_loss": 3.0,
        "eval_no_context_accuracy_ci95": [0.0, 0.2],  # a list: not a cell
        "eval_d2l_accuracy": 0.5,
        "eval_in_context_truncated_answer_loss": 1.25,
        "runtime_s": 61.0,
    }
    lines = summary_table(summary, [], get_algorithm("d2l").console).splitlines()
    assert lines[1].split() == ["accuracy", "answer", "CE"]
    assert lines[2].split() == ["no_context", "0.1", "3"] and lines[3].split() == ["d2l", "0.5", "-"]
    assert lines[4].split() == ["in_context_truncated", "-", "1.25"] and lines[5].split()[0] == "runtime"
    with pytest.raises(ValueError, match="room for two"):
        ConsoleSpec.of({"results": {"a": "x", "b": "y", "c": "z"}})
