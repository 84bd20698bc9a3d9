"""The package's structure: no import cycles, every module imports on its own, algorithms and kernel backends are
named once (a plugin algorithm needs no file outside its package), the wheel works outside the checkout."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

SRC = ROOT / "src"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "posttrain").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """posttrain modules `name` imports anywhere (module level or inside functions; not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                found |= {a.name for a in sub.names}
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - sub.level + 1] + ([base] if base else [])
                    )
                found.add(base)
                found |= {f"{base}.{a.name}" for a in sub.names}
    return {m for m in found if m in known and m != name}


def test_no_import_cycles():
    """Not even through imports deferred into functions: a module never depends on one that depends on it."""
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter():
    """Each module imports with no other posttrain module loaded before it (tests/import_alone.py: a child forked
    per module from an interpreter that has imported only the third-party libraries, not ~6 s of imports each)."""
    names = [n for n in _modules() if not n.endswith("__main__")]  # (importing those runs them)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "import_alone.py"), *names],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failures, failures


def test_composing_a_config_imports_no_torch():
    code = (
        "import sys; from posttrain.config.compose import load_config; "
        "load_config(['algo=d2l'], hf_names=False); load_config(['algo=contrastive', 'kernels=fused'], "
        "hf_names=False); print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_kernel_choices_come_from_the_registry(compose):
    from posttrain.kernels.registry import BACKENDS, CHOICES

    assert not (ROOT / "conf" / "kernels").exists()  # the registry is the only list
    for name in CHOICES:
        assert compose(f"kernels={name}").kernels.backend == name
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in BACKENDS)


def test_no_algorithm_names_outside_algos():
    """hardware/ and run.py talk to algorithms through the protocol only (docstrings aside: none either)."""
    for path in [*(SRC / "posttrain" / "hardware").glob("*.py"), SRC / "posttrain" / "run.py"]:
        text = path.read_text().lower()
        for name in ("grpo", "d2l", "contrastive"):
            assert name not in text, f"{path.name} names {name}"


TOY = '''
"""A toy algorithm living outside the repository: next-token loss on random tokens."""
from dataclasses import dataclass

from posttrain.algos.base import Algorithm, Workload
from posttrain.config.validate import ConfigError


@dataclass
class ToyConfig:
    name: str = "toy"
    seq_len: int = 12


class Toy(Algorithm):
    name = "toy"
    schema = ToyConfig

    def validate(self, cfg):
        if cfg.algo.seq_len < 2:
            raise ConfigError("algo.seq_len must be >= 2")

    def workload(self, cfg):
        n = int(cfg.algo.seq_len)
        return Workload(seqs=int(cfg.trainer.per_device_batch_size), seq_len=n, logit_tokens=n, note="toy rows",
                        train_mode="lora" if cfg.model.lora.enabled else "full")

    def build_trainer(self, cfg, run_dir, callbacks):
        import torch
        from transformers import Trainer, TrainingArguments

        from posttrain.models import load
        from posttrain.training_args import common_training_kwargs

        model, tok = load(cfg)
        g = torch.Generator().manual_seed(cfg.seed)
        rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 200, (64, cfg.algo.seq_len), generator=g)]
        args = TrainingArguments(**common_training_kwargs(cfg, run_dir), remove_unused_columns=False)
        return Trainer(model=model, args=args, train_dataset=rows, callbacks=callbacks)

    def evaluate(self, cfg, run_dir, checkpoint):
        return {"algo": "toy", "checkpoint": str(checkpoint)}


ALGORITHM = Toy()
'''


@pytest.mark.slow
def test_a_plugin_algorithm_trains_and_plans_without_touching_the_repository(tmp_path):
    package = tmp_path / "plugin" / "posttrain" / "algos" / "toy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY))
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugin"), ENV.get("PYTHONPATH", "")])}
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    common = [sys.executable, str(ROOT / "train.py"), "algo=toy", "model=tiny_llama", "trainer.progress_bar=false"]
    plan = subprocess.run([*common, "mode=plan"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    summary = json.loads(plan.stdout.strip().splitlines()[-1])
    assert summary["algo"] == "toy" and summary["params_trainable"] > 0 and summary["fits"]
    bad = subprocess.run(
        [*common, "algo.seq_len=1"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "error: algo.seq_len must be >= 2"
    run = tmp_path / "run"
    train = subprocess.run(
        [*common, "trainer.max_steps=3", "trainer.per_device_batch_size=4", f"hydra.run.dir={run}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    result = json.loads((run / "summary.json").read_text())
    assert result["algo"] == "toy" and result["final_step"] == 3 and result["loss_first5_mean"] > 0
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout == before


@pytest.mark.slow
def test_installed_wheel_runs_outside_the_checkout(tmp_path):
    """`pip install .` (a wheel, not editable): configs and chat templates come from the package."""
    dist, source = tmp_path / "dist", tmp_path / "source"  # built from a copy: no build/ left in the checkout
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "runs", "multirun", "build", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    # the dependencies of this environment (its site-packages may sit inside the checkout, as .venv does in CI), but
    # not the checkout's own source (a .pth line adds no .pth processing, so the editable finder stays inactive)
    deps = [
        p
        for p in sys.path
        if p and Path(p).is_dir() and (Path(p).name == "site-packages" or not Path(p).resolve().is_relative_to(ROOT))
    ]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    wheel = next(dist.glob("posttrain-*.whl"))
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert inst.returncode == 0, inst.stderr[-2000:]
    assert (site / "posttrain" / "conf" / "config.yaml").is_file()
    assert (site / "posttrain" / "chat_templates" / "llama3.jinja").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = str(venv / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import posttrain.paths as p; print(p.CONF_DIR)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={**ENV, "PYTHONPATH": ""},
        timeout=120,
    )
    assert where.stdout.strip() == str(site / "posttrain" / "conf"), where.stderr[-2000:]
    run = subprocess.run(
        [python, "-m", "posttrain", "trainer.max_steps=1", "trainer.progress_bar=false", "hydra.run.dir=run"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={**ENV, "PYTHONPATH": ""},
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((elsewhere / "run" / "summary.json").read_text())["final_step"] == 1


def test_a_broken_algorithm_package_fails_loudly(tmp_path):
    """A package in posttrain.algos that does not import is an error, never a silently missing algorithm (issue 12
    item 17: the old registry swallowed ModuleNotFoundError)."""
    package = tmp_path / "plugin" / "posttrain" / "algos" / "broken"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import no_such_dependency_xyz\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugin"), ENV.get("PYTHONPATH", "")])}
    code = "from posttrain.algos.registry import algorithms; print(sorted(algorithms()))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "no_such_dependency_xyz" in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=ENV
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "['contrastive', 'd2l', 'grpo']", ok.stderr[-2000:]
