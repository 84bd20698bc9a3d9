"""Where did training change things: the LM's pooled representation (before the head) or only the head?

For each run dir, load the final checkpoint and report, over the eval triplets, the mean cosine between the
masked-mean pooled hidden states (no head) of benign vs counterfactual and benign vs injected, and the same
after the projection head; plus a few greedy replies to injected inputs. Each run's result is printed and written
to <run dir>/probe.json, which `report.py --collect` reads.

    python experiments/contrastive_tiny/probe_repr.py runs/contrastive_tiny
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

from posttrain.algos.contrastive.api import build_model
from posttrain.algos.contrastive.checkpoint import load_weights
from posttrain.algos.contrastive.evaluate import generate_replies
from posttrain.checkpoints import complete_checkpoints
from posttrain.data.contrastive import TripletCollator, TripletDataset, build_triplets


@torch.no_grad()
def probe(run_dir: Path, n: int = 64) -> dict:
    cfg = OmegaConf.load(run_dir / "config.yaml")
    with open_dict(cfg):
        cfg.algo.init_from = None
        cfg.data.num_eval = n
    model = build_model(cfg)
    tok = model.tokenizer
    load_weights(model, complete_checkpoints(run_dir / "checkpoints")[-1], cfg)
    model.eval()
    rows = build_triplets(cfg.data, "eval")
    ds = TripletDataset(rows, tok, cfg.algo.max_length, cfg.algo.pool)
    batch = TripletCollator(tok.pad_token_id)([ds[i] for i in range(len(ds))])
    out = model(batch["input_ids"], batch["attention_mask"], batch["pool_mask"])
    h = torch.nn.functional.normalize(out.pooled, dim=-1)
    b = len(rows)

    def cos(x: torch.Tensor, i: int, j: int) -> float:
        return round(float((x[i * b : (i + 1) * b] * x[j * b : (j + 1) * b]).sum(-1).mean()), 3)

    replies = generate_replies(
        model.lm, tok, [(r["injected"]["request"], r["injected"]["data"]) for r in rows[:6]], cfg.algo.max_new_tokens, 8
    )
    return {
        "pooled_cos_benign_counterfactual": cos(h, 0, 1),
        "pooled_cos_benign_injected": cos(h, 0, 2),
        "head_cos_benign_counterfactual": cos(out.z, 0, 1),
        "head_cos_benign_injected": cos(out.z, 0, 2),
        "injected_replies": [f"{r['answer']} / {r['witness']} -> {rep!r}" for r, rep in zip(rows, replies)],
    }


def main() -> None:
    torch.set_num_threads(1)
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/contrastive_tiny")
    for name in ("vulnerable", "contrastive", "lm_only"):
        if (out / name / "config.yaml").is_file():
            result = probe(out / name)
            (out / name / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
            print(name, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
