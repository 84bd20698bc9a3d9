"""Untrusted files: nothing in src/ unpickles what it reads (checkpoints, data, configs).

A scan of every module's syntax tree (not a text grep, so docstrings that *mention* pickles don't count): no
pickle/dill/joblib/marshal/shelve, `torch.load` only with `weights_only=True`, no `torch.save` (tensors go to
safetensors), no `np.load(allow_pickle=True)`, YAML only through safe loaders, no `eval`/`exec`, no
`save_pretrained(safe_serialization=False)`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.reliability.helpers import ROOT

_BANNED_MODULES = {"pickle", "cPickle", "_pickle", "dill", "joblib", "marshal", "shelve", "cloudpickle"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _kw(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value.value if isinstance(kw.value, ast.Constant) else kw.value
    return None


def unsafe_loads(source: str, where: str = "<src>") -> list[str]:
    """`file:line: what` for every unsafe deserialisation in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in _BANNED_MODULES:
                    found.append(f"{where}:{node.lineno}: imports {name}")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        line = f"{where}:{node.lineno}: {name}("
        if name.endswith("torch.load"):
            if _kw(node, "weights_only") is not True:
                found.append(line + ") without weights_only=True")
        elif name.endswith("torch.save"):
            found.append(line + ") (write tensors with safetensors)")
        elif name in ("np.load", "numpy.load") and _kw(node, "allow_pickle") is True:
            found.append(line + "allow_pickle=True)")
        elif name in ("yaml.load", "yaml.load_all") and _dotted(_kw(node, "Loader") or ast.Name("")) not in (
            "yaml.SafeLoader",
            "yaml.CSafeLoader",
            "SafeLoader",
            "CSafeLoader",
        ):
            found.append(line + ") without a safe Loader")
        elif name in (
            "yaml.unsafe_load",
            "yaml.full_load",
            "yaml.full_load_all",
            "yaml.unsafe_load_all",
            "eval",
            "exec",
        ):
            found.append(line + ")")
        elif name.endswith("save_pretrained") and _kw(node, "safe_serialization") is False:
            found.append(line + "safe_serialization=False)")
    return found


def test_the_scan_catches_unsafe_loads():
    bad = (
        "import pickle\nimport torch, yaml, numpy as np\n"
        "torch.load(p)\ntorch.load(p, weights_only=False)\ntorch.save(t, p)\nnp.load(p, allow_pickle=True)\n"
        "yaml.load(s)\nyaml.full_load(s)\neval(s)\nm.save_pretrained(d, safe_serialization=False)\n"
    )
    assert len(unsafe_loads(bad)) == 9
    good = (
        "import torch, yaml, json\n'''torch.load(p) in a docstring'''\ntorch.load(p, weights_only=True)\n"
        "yaml.safe_load(s)\nyaml.load(s, Loader=yaml.SafeLoader)\njson.loads(s)\nimport ast\nast.literal_eval(s)\n"
    )
    assert unsafe_loads(good) == []


def test_src_never_unpickles_what_it_reads():
    files = sorted((ROOT / "src").rglob("*.py"))
    assert len(files) > 20
    found = [hit for f in files for hit in unsafe_loads(f.read_text(), str(f.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_configs_are_yaml_or_json():
    files = [p for p in (ROOT / "conf").rglob("*") if p.is_file()]
    assert files and all(p.suffix in (".yaml", ".yml", ".json") for p in files), [
        str(p) for p in files if p.suffix not in (".yaml", ".yml", ".json")
    ]


def test_checkpoint_tensors_are_safetensors(tmp_path):
    """Every tensor file a checkpoint writes for the model is safetensors; the only torch-format files are HF
    Trainer's optimizer/scheduler/RNG state, which HF reads back with weights_only=True."""
    from tests.reliability.helpers import compose, leg

    leg(compose("grpo", tmp_path, "trainer.max_steps=1"))
    ckpt = tmp_path / "checkpoints" / "checkpoint-1"
    assert (ckpt / "adapter_model.safetensors").is_file()
    torch_files = {p.name for p in ckpt.rglob("*") if p.suffix in (".pt", ".pth", ".bin", ".pkl", ".pickle")}
    assert torch_files <= {"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"}, torch_files
    assert not any(p.suffix in (".pkl", ".pickle") for p in Path(tmp_path).rglob("*"))
