"""The tables of experiments/gpu (what posttrain measured on a CUDA device) from results/checks.csv.

    python experiments/gpu/report.py              # results/checks.csv -> results/report.md
    python experiments/gpu/report.py --collect    # first checks.csv from the lease folders under results/
    python experiments/gpu/report.py --collect DIR --results OUT

`--collect [DIR]` reads every lease folder DIR/<date>_<device>/ (default results/, git-ignored: what a device call
brought back) and writes one row per (lease, check, item, metric) to checks.csv, with the device and the commit
that lease ran (from checks.sh's `env` check):

- checks.sh's JSON lines (`results*.jsonl`, `checks_results.jsonl`): each bench record (`bench grpo_loss`,
  `generation`, `grpo_step`) or train.py summary, its item the backend or path; nested fields dotted, lists as JSON;
  the benches' progress lines are left out;
- checks.sh's logs (`log*.txt`, `checks_log.txt`): each check's exit status and seconds, or that it was skipped, and
  the env check's versions;
- `fold_sweep.log` (`fold_sweep.py`): each block configuration of the Triton fold, the best one, the loss after;
- the real-weight runs of `real.sh` (`make_train_grpo*`, `d2l_*steps*`): the summary train.py prints, the exit
  status and wall seconds, a few per-step metrics, D2L's held-out evaluation.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMAND = "python experiments/gpu/report.py"
COLUMNS = ("lease", "device", "commit", "check", "item", "metric", "value")
VERSIONS = (
    "torch",
    "cuda",
    "device_name",
    "triton",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "pyarrow",
)
STEP_METRICS = {  # real-weight runs: the per-step metrics kept (metrics.jsonl)
    "make_train": (
        "reward",
        "step_time",
        "rollout/tokens_per_second",
        "sampling/sampler_kl",
        "dynamic_sampling/extra_generations",
    ),
    "d2l": ("loss", "ce_loss", "kl_loss", "grad_norm"),
}
LOSS_CHECKS = {
    "loss_2048": "2048 x 2880 x 201088",
    "loss_8192": "8192 x 2880 x 201088",
    "loss_llama": "8192 x 4096 x 128256",
}
BACKENDS = ("two_gemm", "eager", "chunked", "liger", "fused", "triton", "pallas")
MEDIANS = {  # real-weight runs: the per-step metrics summarised by their median
    "rollout/tokens_per_second": "median tokens/s",
    "sampling/sampler_kl": "median sampler KL",
    "dynamic_sampling/extra_generations": "median extra generations",
}


# --- collect: the lease folders -> checks.csv ------------------------------------------------------------------------


def _value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _flatten(record: dict, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for key, value in record.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", _value(value)))
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")]


def _env(folder: Path) -> tuple[str, str, list[tuple[str, str]]]:
    """(device, commit, versions) from the env check's output in the folder's logs ('' where none ran)."""
    for log in sorted(folder.glob("*.txt")):
        lines = log.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"GPU 0: (.+?) \(UUID", line)
            if m and i + 2 < len(lines):
                versions = lines[i + 1].split()
                commit = lines[i + 2].strip() if re.fullmatch(r"[0-9a-f]{7,40}", lines[i + 2].strip()) else ""
                named = list(zip(VERSIONS[:2], versions[:2], strict=True))
                named += list(zip(VERSIONS[3:], versions[-7:], strict=True))
                return m.group(1), commit, named
    return "", "", []


def _check_lines(log: Path) -> list[tuple[str, str, str, str]]:
    """(check, item, metric, value) of checks.sh's status lines in one log (the item: the log's name)."""
    rows, item = [], log.stem
    for line in log.read_text().splitlines():
        if m := re.fullmatch(r"=== (\S+): rc=(\d+) in (\d+) s", line):
            rows += [(m.group(1), item, "rc", m.group(2)), (m.group(1), item, "seconds", m.group(3))]
        elif m := re.fullmatch(r"=== (\S+): SKIPPED \((\d+) s of the budget left\)", line):
            rows.append((m.group(1), item, "skipped_with_s_left", m.group(2)))
        elif m := re.fullmatch(r"=== done in (\d+) s", line):
            rows.append(("checks.sh", item, "seconds", m.group(1)))
    return rows


def _item(record: dict) -> str:
    return str(record.get("backend") or record.get("path") or "summary")


def _real_run(folder: Path, check: str, stem: str) -> list[tuple[str, str, str, str]]:
    """A real-weight train.py run of real.sh: its log's summary and exit line, per-step metrics, evaluation."""
    rows: list[tuple[str, str, str, str]] = []
    log = folder / f"{stem}.log"
    if log.is_file():
        for line in log.read_text().splitlines():
            if line.startswith('{"run_dir"'):
                rows += [(check, "summary", k, v) for k, v in _flatten(json.loads(line))]
            if m := re.search(r"\w+ rc=(\d+) wall=(\d+) s$", line):
                rows += [(check, "summary", "rc", m.group(1)), (check, "summary", "wall_s", m.group(2))]
    metrics = folder / f"{stem}_metrics.jsonl"
    kind = "make_train" if check.startswith("make_train") else "d2l"
    if metrics.is_file():
        for rec in _jsonl(metrics):
            rows += [(check, f"step {rec['step']}", k, _value(rec[k])) for k in STEP_METRICS[kind] if k in rec]
    evaluation = folder / f"{stem}_eval.json"
    if evaluation.is_file():
        data = json.loads(evaluation.read_text())
        for key, value in data.items():
            if key in ("examples", "per_question"):
                continue
            if isinstance(value, dict):
                rows += [(check, f"eval {key}", k, _value(v)) for k, v in value.items()]
            else:
                rows.append((check, "eval", key, _value(value)))
    return rows


def collect(raw: Path, out: Path) -> Path:
    rows = []
    for folder in sorted(p for p in raw.iterdir() if p.is_dir()):
        device, commit, versions = _env(folder)
        found = [("env", "", k, v) for k, v in versions]
        for log in sorted([*folder.glob("log*.txt"), *folder.glob("checks_log.txt")]):
            found += _check_lines(log)
        for path in sorted([*folder.glob("results*.jsonl"), *folder.glob("checks_results.jsonl")]):
            for rec in _jsonl(path):
                if "progress" not in rec:
                    found += [(rec["check"], _item(rec), k, v) for k, v in _flatten(rec) if k != "check"]
        sweep = folder / "fold_sweep.log"
        if sweep.is_file():
            for rec in _jsonl(sweep):
                if "fold" in rec:
                    f = rec["fold"]
                    item = f"tile {f['tile'][0]}x{f['tile'][1]} rows {f['rows']} block {f['block']} warps {f['warps']}"
                    found += [("fold_sweep", item, k, _value(f[k])) for k in ("ms", "tb_per_s")]
                elif "best" in rec:
                    found += [("fold_sweep", "best", k, _value(v)) for k, v in rec.items()]
                else:
                    item = f"{rec['backend']} {'x'.join(map(str, rec['shape']))}"
                    found += [("fold_sweep_loss", item, k, _value(v)) for k, v in rec.items() if k != "backend"]
        for log in sorted(folder.glob("*.log")):
            stem = log.stem
            if stem.startswith(("make_train", "d2l_")):
                found += _real_run(folder, stem, stem)
        rows += [[folder.name, device, commit, *r] for r in found]
    if not rows:
        sys.exit(f"no lease folders with results under {raw}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "checks.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return path


# --- report: checks.csv -> report.md ---------------------------------------------------------------------------------


def read_table(results: Path) -> dict[str, dict]:
    """{lease: {"device", "commit", "checks": {check: {item: {metric: value}}}}}, in the CSV's order."""
    leases: dict[str, dict] = {}
    with (results / "checks.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            lease = leases.setdefault(
                row["lease"], {"device": row["device"], "commit": row["commit"], "checks": defaultdict(dict)}
            )
            lease["checks"][row["check"]].setdefault(row["item"], {})[row["metric"]] = row["value"]
    return leases


def _f(value: str | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value in (None, "", "null") else f"{float(value) * scale:{spec}}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def loss_table(checks: dict) -> list[str]:
    rows = []
    for check, shape in LOSS_CHECKS.items():
        for backend in BACKENDS:
            r = checks.get(check, {}).get(backend)
            if r:
                cells = [shape, backend, _f(r.get("seconds"), ".2f", 1e3), _f(r.get("median_seconds"), ".2f", 1e3)]
                cells += [_f(r.get("ratio_vs_two_gemm"), ".3f"), _f(r.get("peak_mib"), ".1f")]
                rows.append(cells)
    head = ["shape N x H x V", "backend", "ms (min of 5)", "median ms", "/ two bf16 GEMMs", "peak MiB over the inputs"]
    return _table(head, rows) if rows else []


def generation_table(checks: dict) -> list[str]:
    rows = []
    for check in ("gen_check", "gen_256"):
        for backend, r in checks.get(check, {}).items():
            if "bench" not in r:  # checks.sh's status of the check
                continue
            rows.append(
                [f"{r['batch']} x {r['new_tokens']}", backend, _f(r.get("tokens_per_s"), ".1f")]
                + [_f(r.get("first_call_s"), ".1f"), r.get("greedy_equal", "-"), _f(r.get("peak_gib"), ".3f")]
            )
    head = ["batch x new tokens", "engine", "tokens/s", "first call s", "greedy tokens equal to `generate`", "peak GiB"]
    return _table(head, rows) if rows else []


def step_table(checks: dict) -> list[str]:
    records = {path: r for path, r in checks.get("step", {}).items() if "bench" in r}
    if not records:
        return []
    anchor = float(records["trl"]["step_s"]) if "trl" in records else None
    rows = []
    for path, r in records.items():
        ratio = f"{float(r['step_s']) / anchor:.2f}x" if anchor else "-"
        rows.append(
            [path, _f(r["step_s"], ".3f"), ratio, _f(r.get("split_s.generation"), ".3f")]
            + [_f(r.get("split_s.loss_backward"), ".3f"), _f(r.get("gen_tokens_per_s"), ".1f")]
            + [_f(r.get("peak_cuda_gib"), ".2f")]
        )
    head = ["path", "s/step", "/ trl", "generation s", "loss+backward s", "tokens/s in the step", "peak CUDA GiB"]
    return _table(head, rows)


def algorithm_table(checks: dict) -> list[str]:
    rows = []
    for check in ("grpo_gpt_oss", "d2l", "contrastive"):
        r = checks.get(check, {}).get("summary")
        if r:
            finals = [
                (k.removeprefix("final_"), v) for k, v in r.items() if k.startswith("final_") and k != "final_step"
            ]
            cells = [check, r.get("algo", "-"), _f(r.get("runtime_s"), ".2f"), r.get("final_step", "-")]
            rows.append([*cells, ", ".join(f"{k} {float(v):.4g}" for k, v in finals)])
    return _table(["check", "algo", "runtime s", "steps", "final values"], rows) if rows else []


def status_table(checks: dict) -> list[str]:
    rows = []
    for check, items in checks.items():
        for log, r in items.items():
            if log == "summary":  # a real-weight run's exit status: in its own table
                continue
            if "skipped_with_s_left" in r:
                rows.append([log, check, f"skipped ({r['skipped_with_s_left']} s of the budget left)", "-"])
            elif "rc" in r:
                rows.append([log, check, f"rc {r['rc']}", r.get("seconds", "-")])
            elif check == "checks.sh":
                rows.append([log, "all (checks.sh)", "done", r["seconds"]])
    rows.sort(key=lambda row: row[0])  # stable: each log's checks in the order they ran
    return _table(["log", "check", "exit", "seconds"], rows) if rows else []


def fold_tables(checks: dict) -> list[str]:
    configs = checks.get("fold_sweep", {})
    if not configs:
        return []
    rows = [[item, _f(r["ms"], ".4f"), _f(r["tb_per_s"], ".2f")] for item, r in configs.items() if item != "best"]
    lines = _table(["configuration", "ms", "TB/s"], rows)
    best = configs.get("best")
    if best:
        lines += [
            "",
            f"best {best['best']} in {best['best_ms']} ms; default {best['default']} in {best['default_ms']} ms",
        ]
    after = checks.get("fold_sweep_loss", {})
    if after:
        rows = [
            [
                " x ".join(map(str, json.loads(r["shape"]))),
                item.split()[0],
                _f(r["ms"], ".3f"),
                _f(r["median_ms"], ".3f"),
                _f(r["ratio_vs_two_gemm"], ".3f"),
            ]
            for item, r in after.items()
        ]
        lines += [
            "",
            "The loss with the best configuration:",
            "",
            *_table(["shape", "backend", "ms", "median ms", "/ two GEMMs"], rows),
        ]
    return lines


def _steps(items: dict, metric: str) -> list[float]:
    return [float(r[metric]) for item, r in items.items() if item.startswith("step ") and metric in r]


def real_weight_tables(checks: dict) -> list[str]:
    lines = []
    for check, items in checks.items():
        if not (check.startswith("make_train") or check.startswith("d2l_")):
            continue
        s = items.get("summary", {})
        cells = [f"{k} {s[k]}" for k in ("rc", "wall_s", "runtime_s", "final_step") if k in s]
        if "heldout_acc_before" in s:
            eval_s = s.get("heldout_eval_s", "-")
            cells.append(f"held-out {s['heldout_acc_before']} -> {s['heldout_acc_after']} (eval {eval_s} s)")
        for k in ("final_loss", "final_ce_loss"):
            if k in s:
                cells.append(f"{k} {float(s[k]):.4f}")
        step_time = _steps(items, "step_time")
        if step_time:
            cells.append(
                f"first step {step_time[0]:.2f} s, median of the others {statistics.median(step_time[1:]):.4f} s"
            )
        for metric, label in MEDIANS.items():
            values = _steps(items, metric)
            if values:
                cells.append(f"{label} {statistics.median(values):.4g}")
        evals = items.get("eval d2l")
        if evals:
            cells.append(
                f"held-out D2L accuracy {float(evals['accuracy']):.3f}, F1 {float(evals['f1']):.3f}, "
                f"answer CE {float(evals['answer_loss']):.3f} (n {evals['n']}); internalization "
                f"{float(items['eval']['internalize_ms_per_doc']):.2f} ms per document"
            )
        lines.append(f"- **{check}**: " + "; ".join(cells))
    return lines


def report(results: Path, out: Path) -> Path:
    leases = read_table(results)
    text = [f"<!-- {COMMAND} -->", ""]
    for name, lease in leases.items():
        checks = lease["checks"]
        env = checks.get("env", {}).get("", {})
        versions = ", ".join(f"{k} {env[k]}" for k in VERSIONS if k in env)
        text += [f"## {name}: {lease['device'] or '-'}, commit {lease['commit'] or '-'}", ""]
        if versions:
            text += [versions, ""]
        for title, lines in (
            ("Checks (checks.sh)", status_table(checks)),
            ("Loss kernels (`bench grpo_loss --device cuda --dtype bf16 --rounds 1`, TF32 on)", loss_table(checks)),
            ("Rollout engines (`bench generation --set hw=h200 --set model.tiny=true`)", generation_table(checks)),
            ("GRPO step (`bench grpo_step --set hw=h200 --set model.tiny=true`)", step_table(checks)),
            ("Every algorithm in bf16 on CUDA (`train.py ... hw=h200 trainer.max_steps=3`)", algorithm_table(checks)),
            ("The Triton fold's block sizes (`fold_sweep.py`)", fold_tables(checks)),
            ("Real SmolLM2 weights (`real.sh`)", real_weight_tables(checks)),
        ):
            if lines:
                text += [f"### {title}", "", *lines, ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=HERE / "results", help="checks.csv (read, or written)")
    ap.add_argument("--out", type=Path, help="where report.md goes (default: --results)")
    ap.add_argument("--collect", nargs="?", const=HERE / "results", type=Path, help="lease folders to collect first")
    args = ap.parse_args(argv)
    if args.collect is not None:
        path = collect(args.collect, args.results)
        print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    print(report(args.results, args.out or args.results).read_text())


if __name__ == "__main__":
    main()
