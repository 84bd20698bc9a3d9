"""`mode=export`: a trained checkpoint as a standard Hugging Face model directory.

    python train.py hydra.run.dir=<run dir> mode=export [eval.checkpoint=<dir>] [export.dir=<dir>]
        [export.push_to_hub=<user/name>]

The algorithm gives its trained causal LM (`Algorithm.trained_lm`); LoRA adapters are merged into the base weights
(PEFT's `merge_and_unload`), and the model and tokenizer (with its chat template) are saved with `save_pretrained`,
so `AutoModelForCausalLM.from_pretrained(<dir>)` loads it with no posttrain and no PEFT. `export.push_to_hub` also
uploads it (a machine with hub access and a token). `export.json` beside it names the source checkpoint and base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.errors import ConfigError


def export(cfg: DictConfig, run_dir: Path, checkpoint: Path | None) -> dict[str, Any]:
    """Merge and save the checkpoint's model; the summary of what was written."""
    from posttrain.algos.registry import get_algorithm

    if cfg.model.get("quantization") == "mxfp4" and cfg.model.get("mxfp4") == "native":
        raise ConfigError("mode=export writes bf16 weights: use model.mxfp4=dequantize (the native experts stay MXFP4)")
    model, tokenizer = get_algorithm(cfg.algo.name).trained_lm(cfg, checkpoint)
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    out = Path(cfg.export.dir) if cfg.export.get("dir") else run_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    info = {
        "mode": "export",
        "export_dir": str(out),
        "checkpoint": str(checkpoint) if checkpoint else None,
        "base_model": cfg.model.get("hub_id") or cfg.model.name,
        "merged_lora": merged is not model,
    }
    (out / "export.json").write_text(json.dumps(info, indent=2))
    if cfg.export.get("push_to_hub"):
        merged.push_to_hub(cfg.export.push_to_hub)
        tokenizer.push_to_hub(cfg.export.push_to_hub)
        info["pushed_to"] = cfg.export.push_to_hub
    print(f"exported {checkpoint or 'the starting weights'} to {out}", flush=True)
    return info
