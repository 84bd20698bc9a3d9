"""Print the markdown result table of experiments/contrastive_tiny from the runs' summary.json files.

python experiments/contrastive_tiny/table.py runs/contrastive_tiny
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLS = ("asr_heldout", "asr_train_templates", "utility_benign", "utility_injected")


def rows(out: Path) -> list[tuple[str, dict]]:
    found = []
    for name, label in (("contrastive", "contrastive + LM"), ("lm_only", "LM only (ablation)")):
        path = out / name / "summary.json"
        if not path.is_file():
            continue
        summary = json.loads(path.read_text())
        if not found:
            found.append(("before: vulnerable start (both runs start here)", summary["eval_before"]))
        found.append((f"after: {label}", summary["eval_after"]))
    return found


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/contrastive_tiny")
    table = rows(out)
    n = table[0][1] if table else {}
    print(
        f"| weights | held-out ASR (n={n.get('n_heldout')}) | train-template ASR (n={n.get('n_train_templates')}) "
        "| benign utility | utility under injection |"
    )
    print("|---|---|---|---|---|")
    for label, m in table:
        print(f"| {label} | " + " | ".join(f"{m[c]:.2f}" for c in COLS) + " |")
    for label, m in table:
        print(f"{label}: asr_by_type {json.dumps(m['asr_by_type'])}")


if __name__ == "__main__":
    main()
