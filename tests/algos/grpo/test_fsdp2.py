"""FSDP2 (`fully_shard`, 2 ranks over gloo on CPU): the sharded GRPO loss has the one-process gradients.

The kernel path must run inside the FSDP root's forward (the root unshards the embedding, final norm and LM head);
called on the backbone directly it fails on sharded (DTensor) parameters. `tests/algos/grpo/fsdp2_grpo_loss.py` does
the work; here it is launched once, with torch's own launcher, for all three backends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
KERNELS = ["trl", "eager", "fused"]


@pytest.fixture(scope="module")
def fsdp2_results(tmp_path_factory) -> dict[str, dict]:
    """One 2-rank launch of the helper for every backend: {kernels: its JSON line}."""
    tmp = tmp_path_factory.mktemp("fsdp2")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(port),
            str(ROOT / "tests" / "algos" / "grpo" / "fsdp2_grpo_loss.py"),
            str(tmp),
            ",".join(KERNELS),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = {out["kernels"]: out for out in lines}
    assert len(lines) == len(results) == len(KERNELS), proc.stdout[-3000:]
    return results


@pytest.mark.parametrize("kernels", KERNELS)
def test_fsdp2_two_ranks_match_one_process(fsdp2_results, kernels):
    out = fsdp2_results[kernels]
    assert out["sharded"].startswith("FSDP") and out["ref_grad_norm"] > 0.05
    assert out["max_rel_grad_err"] < 1e-5, out
