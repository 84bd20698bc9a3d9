"""How much the generated LoRA depends on the document: for a trained hypernet, the LoRAs of the held-out
documents, and the norm of each one's difference from their mean relative to the mean's norm (0: one adapter
for every document).

    python experiments/d2l_smollm2/lora_spread.py runs/d2l_smollm2/short_s0 runs/d2l_smollm2/seed0
"""

from __future__ import annotations

import argparse
import statistics

import torch

from posttrain.algos.d2l.api import load_d2l
from posttrain.config.compose import load_config
from posttrain.data.d2l import d2l_records


def flat(lora) -> torch.Tensor:
    """One vector per document: every generated A and B, in a fixed order ([documents, numbers])."""
    parts = [lora.A[k].flatten(1) for k in sorted(lora.A)] + [lora.B[k].flatten(1) for k in sorted(lora.B)]
    return torch.cat(parts, dim=1).float()


def spread(run: str) -> dict[str, float]:
    cfg = load_config(["+experiment=d2l_smollm2"])
    model = load_d2l(cfg, run).eval()
    _, held = d2l_records(cfg.data, model.tokenizer)
    docs = list(dict.fromkeys(r["document"] for r in held))
    with torch.no_grad():
        v = flat(model.internalize(docs))
    mean = v.mean(0)
    rel = ((v - mean).norm(dim=1) / mean.norm()).tolist()
    return {"documents": len(docs), "median": statistics.median(rel), "min": min(rel), "max": max(rel)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+")
    for run in p.parse_args().runs:
        s = spread(run)
        print(
            f"{run}: {s['documents']} documents, |LoRA - mean| / |mean| median {s['median']:.4f} "
            f"(min {s['min']:.4f}, max {s['max']:.4f})"
        )


if __name__ == "__main__":
    main()
