"""Read run directories into pandas: one run, a multirun (sweep) dir, or any folder that holds runs.

A run directory is any folder with `metrics.jsonl` or `summary.json` (what `posttrain.run` writes); checkpoints
inside it are skipped. The command-line overrides of each run (`.hydra/overrides.yaml`, written by Hydra) become
columns, typed as YAML reads them (`algo.trl.beta=0.04` -> float 0.04, `seed=1` -> int, `model=tiny_llama` -> str).

    df = load_runs("multirun/2026-11-21/12-00-00")   # one row per (run, logged step)
    df.attrs["swept"]                                 # override columns whose value differs between runs
    s = load_summaries("multirun/...")                # one row per run: overrides + summary.json
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

RUN_FILES = ("metrics.jsonl", "summary.json")
_SKIP_PARTS = ("checkpoints", ".hydra", ".submitit", "wandb")


def find_runs(path: str | Path) -> list[Path]:
    """Run directories at or under `path`, in job order (Hydra job number, then name)."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such directory")
    if any((root / f).is_file() for f in RUN_FILES):
        return [root]
    found = {
        p.parent
        for name in RUN_FILES
        for p in root.rglob(name)
        if not any(part in _SKIP_PARTS for part in p.relative_to(root).parts[:-1])
    }
    return sorted(found, key=lambda d: (_job_num(d) if _job_num(d) is not None else 1 << 30, str(d)))


def _job_num(run_dir: Path) -> int | None:
    hydra_yaml = run_dir / ".hydra" / "hydra.yaml"
    if hydra_yaml.is_file():
        try:
            num = yaml.safe_load(hydra_yaml.read_text())["hydra"]["job"].get("num")
            return int(num) if num is not None else None
        except (KeyError, TypeError, ValueError, yaml.YAMLError):
            pass
    head = run_dir.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def parse_override(text: str) -> tuple[str, Any] | None:
    """`algo.trl.beta=0.04` -> ("algo.trl.beta", 0.04); None for deletions and Hydra's own settings."""
    text = text.strip()
    if text.startswith("~") or "=" not in text:
        return None
    key, value = text.split("=", 1)
    key = key.lstrip("+")
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return None
    try:
        parsed = yaml.safe_load(value) if value != "" else ""
    except yaml.YAMLError:
        parsed = value
    if isinstance(parsed, (dict, list)):
        parsed = value  # keep sweep-style values hashable and readable
    return key, parsed


def run_overrides(run_dir: str | Path) -> dict[str, Any]:
    """The run's command-line overrides from `.hydra/overrides.yaml` (empty when the run had none or no Hydra dir)."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    out: dict[str, Any] = {}
    for item in yaml.safe_load(path.read_text()) or []:
        parsed = parse_override(str(item))
        if parsed is not None:
            out[parsed[0]] = parsed[1]
    return out


def config_values(run_dir: str | Path, keys: Iterable[str]) -> dict[str, Any]:
    """Values of dotted `keys` in the run's resolved `config.yaml` (None where absent), e.g. ["kernels.backend"]."""
    keys = list(keys)
    path = Path(run_dir) / "config.yaml"
    if not keys or not path.is_file():
        return {k: None for k in keys}
    cfg = yaml.safe_load(path.read_text()) or {}
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node if not isinstance(node, (dict, list)) else str(node)
    return out


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_name(run_dir: Path, root: Path) -> str:
    return run_dir.name if run_dir == root else str(run_dir.relative_to(root))


def _mark_swept(df: pd.DataFrame, override_cols: list[str], per_run: pd.DataFrame) -> pd.DataFrame:
    df.attrs["overrides"] = override_cols
    df.attrs["swept"] = [c for c in override_cols if c in per_run and per_run[c].astype(str).nunique(dropna=False) > 1]
    return df


def load_runs(path: str | Path, metrics: Iterable[str] | None = None, config: Iterable[str] = ()) -> pd.DataFrame:
    """One row per (run, logged step): `run`, `run_dir`, `job`, one column per override, `step`, the metrics.

    `path` is a run directory, a multirun directory, or a folder of either. `metrics` keeps only those metric
    columns (default: all). `config` adds columns read from each run's resolved config.yaml (dotted keys such as
    "kernels.backend"), for runs started separately rather than as one sweep. A run without logged steps
    contributes one row with `step` NaN, so failed or planned runs still show up. `df.attrs["swept"]` names the
    override (and `config`) columns that vary between runs.
    """
    root = Path(path)
    runs = find_runs(root)
    keep = list(metrics) if metrics is not None else None
    rows: list[dict[str, Any]] = []
    per_run: list[dict[str, Any]] = []
    override_cols: list[str] = []
    for run_dir in runs:
        overrides = {**run_overrides(run_dir), **config_values(run_dir, config)}
        override_cols += [k for k in overrides if k not in override_cols]
        base = {"run": _run_name(run_dir, root), "run_dir": str(run_dir), "job": _job_num(run_dir), **overrides}
        per_run.append(base)
        records = _read_metrics(run_dir) or [{"step": float("nan")}]
        for rec in records:
            if keep is not None:
                rec = {k: v for k, v in rec.items() if k == "step" or k in keep}
            rows.append({**base, **rec})
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=["run", "run_dir", "job", "step"])
    return _mark_swept(df, override_cols, pd.DataFrame(per_run))


def load_summaries(path: str | Path, config: Iterable[str] = ()) -> pd.DataFrame:
    """One row per run: `run`, `run_dir`, `job`, the overrides (and `config` keys, as in `load_runs`), then
    summary.json's scalars (objective, final_*, runtime_s, world_size)."""
    root = Path(path)
    rows, override_cols = [], []
    for run_dir in find_runs(root):
        overrides = {**run_overrides(run_dir), **config_values(run_dir, config)}
        override_cols += [k for k in overrides if k not in override_cols]
        summary = {k: v for k, v in read_summary(run_dir).items() if not isinstance(v, (dict, list))}
        rows.append(
            {"run": _run_name(run_dir, root), "run_dir": str(run_dir), "job": _job_num(run_dir), **overrides, **summary}
        )
    df = pd.DataFrame(rows)
    return _mark_swept(df, override_cols, df)


def load_optuna(path: str | Path) -> dict[str, Any]:
    """The Optuna sweeper's `optimization_results.yaml` in a sweep dir: {name, best_params, best_value}."""
    file = Path(path) / "optimization_results.yaml"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: not an Optuna sweep directory (run with hparams_search=...)")
    return yaml.safe_load(file.read_text())


def label(row: pd.Series | dict[str, Any], columns: Iterable[str]) -> str:
    """`algo.trl.beta=0.04 seed=1` for a run's values of `columns` (the run name when there are none)."""
    cols = list(columns)
    if not cols:
        return str(row["run"])
    return " ".join(f"{c}={row[c]}" for c in cols)
