"""Run one bad-input case of `python train.py` (a subprocess, or in this interpreter) and check its contract.

Used by cases.py (the case list and the README table) and tests/reliability/test_bad_inputs.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE / "plugin"

# tiny, quick GRPO run: the base every case starts from
FAST = (
    "trainer.max_steps=2",
    "trainer.per_device_batch_size=4",
    "algo.trl.num_generations=2",
    "trainer.progress_bar=false",
    "data.num_train=8",
    "algo.trl.max_completion_length=4",
)
CONTRASTIVE = (
    "algo=contrastive",
    "data=contrastive_injection",
    "data.num_train=8",
    "data.num_eval=0",
    "algo.head_hidden_dim=8",
    "algo.proj_dim=8",
    "trainer.per_device_batch_size=2",
    "trainer.max_steps=2",
    "trainer.progress_bar=false",
)
D2L = ("algo=d2l", "data=d2l_synth", "trainer.progress_bar=false")


@dataclass
class Case:
    id: str
    problem: str  # what is wrong, in words (the table's first column)
    args: tuple[str, ...]  # overrides; {case} = this case's dir, {good} = a complete 1-step checkpoint
    expect: str  # a regex the one error line must match
    setup: Callable[[Path], None] | None = None  # writes the bad input under the case dir
    base: tuple[str, ...] = FAST
    plugin: bool = False  # needs the broken rewards in plugin/
    env: dict[str, str] = field(default_factory=dict)
    writes_nothing: bool = False  # refused before Hydra creates the run dir: no new file under the case dir either
    before: str = ""  # how issue 60 saw this input at c264df7, for the inputs it names (report.BEFORE's rows)


# -- running ----------------------------------------------------------------------------------------------------
@dataclass
class Result:
    case: Case
    rc: int
    stderr: str
    stdout: str
    changed: list[str]
    seconds: float
    created: list[str] = field(default_factory=list)  # files under the case dir that were not there before

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    @property
    def message(self) -> str:
        errs = [ln for ln in self.lines if ln.startswith("error:")]
        return errs[-1] if errs else (self.lines[-1] if self.lines else "")

    def problems(self) -> list[str]:
        """Why this result breaks the contract (empty when it holds)."""
        out = []
        if self.rc == 0:
            out.append("exit code 0")
        if len(self.lines) != 1 or not self.lines[0].startswith("error: "):
            out.append(f"stderr has {len(self.lines)} non-empty lines: {self.lines[-3:]}")
        if not re.search(self.case.expect, self.message):
            out.append(f"message does not match {self.case.expect!r}")
        if self.changed:
            out.append(f"changed on disk: {self.changed}")
        if self.case.writes_nothing and self.created:
            out.append(f"wrote {self.created}")
        return out


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def command(case: Case, case_dir: Path) -> list[str]:
    args = [a.replace("{case}", str(case_dir)) for a in (*case.base, *case.args)]
    return [*args, f"hydra.run.dir={case_dir}/run"]


def _env(case: Case) -> dict[str, str]:
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        **case.env,
    }
    if case.plugin:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))
    return env


def _run_subprocess(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=900,
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_cli_inprocess(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`posttrain.cli_inprocess.run_cli_inprocess`, with the reward plugin imported where the case's PYTHONPATH
    names it (a subprocess's sitecustomize.py does that); its rewards do not outlive the call."""
    from posttrain.cli_inprocess import run_cli_inprocess as run
    from posttrain.rewards import REWARDS

    saved = dict(REWARDS)
    if PLUGIN_DIR.as_posix() in (env or {}).get("PYTHONPATH", ""):
        if str(PLUGIN_DIR) not in sys.path:
            sys.path.insert(0, str(PLUGIN_DIR))
        import reliability_rewards  # noqa: F401
    try:
        return run(argv, env)
    finally:
        sys.modules.pop("reliability_rewards", None)
        REWARDS.clear()
        REWARDS.update(saved)


def make_good_checkpoint(work: Path, inprocess: bool = False) -> Path:
    """A complete 1-step tiny_llama GRPO checkpoint the checkpoint cases copy (and must not modify)."""
    run = work / "good"
    ckpt = run / "checkpoints" / "checkpoint-1"
    if not (ckpt / "COMPLETE").is_file():
        argv = [*FAST, "trainer.max_steps=1", f"hydra.run.dir={run}"]
        rc, out, err = (run_cli_inprocess if inprocess else _run_subprocess)(argv, _env(Case("good", "", (), "")))
        if rc != 0 or not (ckpt / "COMPLETE").is_file():
            raise RuntimeError(f"could not make the reference checkpoint (rc={rc}): {err[-2000:]}")
    os.environ["RELIABILITY_GOOD_CKPT"] = str(ckpt)
    return ckpt


def run_case(case: Case, work: Path, inprocess: bool = False) -> Result:
    case_dir = work / case.id
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    if case.setup:
        case.setup(case_dir)
    watched = (case_dir, work / "good")  # this case's files and the shared reference checkpoint
    before = {f"{d.name}/{k}": v for d in watched for k, v in _snapshot(d).items()}
    start = time.time()
    rc, out, err = (run_cli_inprocess if inprocess else _run_subprocess)(command(case, case_dir), _env(case))
    after = {f"{d.name}/{k}": v for d in watched for k, v in _snapshot(d).items()}
    changed = sorted(k for k, v in before.items() if after.get(k) != v)
    created = sorted(k for k in after if k not in before)
    return Result(case, rc, err, out, changed, round(time.time() - start, 1), created)
