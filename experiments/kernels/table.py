"""Markdown tables from `python -m posttrain.bench grpo_loss` JSON lines (as written by run_tables.sh).

python experiments/kernels/table.py experiments/kernels/results/*_TAG.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NAMES = {
    "fused": "**fused**",
    "fused@tiles": "fused@tiles (torch tile loop: the previous fused)",
    "fused@upcast": "fused@upcast (fp32 GEMMs)",
}


def table(path: str) -> str:
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.startswith("{")]
    shape, dtype = "x".join(map(str, recs[0]["shape"])), recs[0]["dtype"]
    rows = [
        f"`results/{Path(path).name}` ({shape}, {dtype})",
        "",
        "| backend | seconds (min) | all rounds (s) | load avg per round | peak MiB | vs two-GEMM |",
        "|---|---|---|---|---|---|",
    ]
    for r in recs:
        if "error" in r:
            rows.append(f"| {r['backend']} | error: {r['error']} | | | | |")
            continue
        rows.append(
            f"| {NAMES.get(r['backend'], r['backend'])} | {r['seconds']:.3f} | "
            f"{', '.join(f'{t:.2f}' for t in r['times'])} | "
            f"{', '.join(f'{x:.1f}' for x in r.get('loadavg', []))} | {r['peak_mib']:.0f} | "
            f"{r.get('ratio_vs_two_gemm', float('nan')):.3f} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print("\n\n".join(table(p) for p in sys.argv[1:]))
