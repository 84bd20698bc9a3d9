"""`mode=sample`: completions of given prompts from a trained checkpoint (or the starting weights).

    python train.py hydra.run.dir=<run dir> mode=sample 'sample.prompts=["What is 12+30?"]' [sample.file=<txt>]
        [sample.max_new_tokens=64] [sample.temperature=0]  [eval.checkpoint=init|<dir>]

Each prompt (a line of `sample.file`, or an item of `sample.prompts`) is one user message under the model's chat
template; greedy at `sample.temperature=0`. One JSON line per completion on stdout: {"prompt", "completion"}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posttrain.errors import ConfigError


def prompts_of(cfg: DictConfig) -> list[str]:
    """`sample.prompts`, then the non-empty lines of `sample.file`; ConfigError when there are none."""
    prompts = [str(p) for p in cfg.sample.prompts]
    if cfg.sample.get("file"):
        prompts += [ln for ln in Path(cfg.sample.file).read_text().splitlines() if ln.strip()]
    if not prompts:
        raise ConfigError("mode=sample needs prompts: sample.prompts=[...] or sample.file=<one prompt per line>")
    return prompts


def sample(cfg: DictConfig, checkpoint: Path | None) -> list[dict[str, Any]]:
    """The completions, printed as JSON lines and returned."""
    import torch

    from posttrain.algos.registry import get_algorithm
    from posttrain.dist import device_for
    from posttrain.models.generation import generate

    prompts = prompts_of(cfg)
    torch.manual_seed(cfg.seed)
    model, tokenizer = get_algorithm(cfg.algo.name).trained_lm(cfg, checkpoint)
    model.to(device_for(cfg))
    t = float(cfg.sample.temperature)
    kwargs = {"do_sample": True, "temperature": t} if t > 0 else {"do_sample": False}
    messages = [[{"role": "user", "content": p}] for p in prompts]
    texts, _ = generate(model, tokenizer, messages, max_new_tokens=int(cfg.sample.max_new_tokens), **kwargs)
    rows = [{"prompt": p, "completion": c} for p, c in zip(prompts, texts)]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows
