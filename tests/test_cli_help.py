"""`--help` answers with the common commands, and exits 0 (Hydra's stock text and the bench's exit 2 before)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, run_cli


def test_train_help_lists_the_common_commands_and_groups():
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for needle in (
        "Common commands:",
        "mode=plan",
        "mode=export",
        "mode=sample",
        "resume=auto",
        "algo: contrastive, d2l, grpo",
    ):
        assert needle in proc.stdout, needle


def test_bench_help_exits_0():
    proc = subprocess.run([sys.executable, "-m", "posttrain.bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "grpo_loss|grpo_step|generation" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "posttrain.bench", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage:" in bad.stderr


def test_cfg_job_prints_the_config_the_run_uses():
    """`--cfg job` shows the hardware profile's and the algorithm's device choices applied (Hydra's own print showed
    `kernels.backend: trl` while hw=cpu runs fused), named in its first line; a bad key is still one line."""
    import yaml

    proc = run_cli("--cfg", "job")
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, _, body = proc.stdout.partition("\n")
    assert first.startswith("# as the run uses it: hw=cpu's profile") and "kernels.backend=fused" in first
    cfg = yaml.safe_load(body)
    assert cfg["kernels"]["backend"] == "fused" and cfg["hw"]["name"] == "cpu"
    kept = yaml.safe_load(run_cli("--cfg", "job", "kernels=trl").stdout.partition("\n")[2])
    assert kept["kernels"]["backend"] == "trl"  # the command line's choice stays
    bad = run_cli("--cfg", "job", "trainer.lrr=1")
    assert (
        bad.returncode == 2 and bad.stderr.strip().startswith("error: trainer.lrr:") and "\n" not in bad.stderr.strip()
    )


def test_non_ascii_values_are_quoted_for_hydras_grammar():
    from posttrain.cli import quote_non_ascii

    assert quote_non_ascii(["hydra.run.dir=runs/ümlaut", "seed=1", "data.path=a,b", "x='ü'", "--cfg"]) == [
        "hydra.run.dir='runs/ümlaut'",
        "seed=1",
        "data.path=a,b",  # a sweep or list keeps the grammar it was written in
        "x='ü'",
        "--cfg",
    ]


def test_a_run_refused_after_hydra_made_its_dir_leaves_nothing(tmp_path):
    """A LoRA target that names no module is found once the plan builds the (meta) model, after Hydra wrote
    `.hydra/` and its job log: they go, and so does the dir this command made; a dir that held anything else is
    left as it is (Hydra's files with it)."""
    run = tmp_path / "run"
    proc = run_cli("trainer.max_steps=1", "model.lora.target_modules=[foo_proj]", f"hydra.run.dir={run}")
    assert proc.returncode == 2 and "names no module" in proc.stderr and not run.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("the researcher's\n")
    proc = run_cli("trainer.max_steps=1", "model.lora.target_modules=[foo_proj]", f"hydra.run.dir={kept}")
    assert proc.returncode == 2 and (kept / "notes.txt").read_text() == "the researcher's\n"
    assert (kept / ".hydra").is_dir()
