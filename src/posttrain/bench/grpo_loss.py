"""Policy-loss benchmark: forward + backward w.r.t. hidden states, each backend in its own process.

    python -m posttrain.bench grpo_loss --shape 2048,2880,201088 [--backends eager,chunked,fused]
        [--dtype fp32|bf16] [--rounds 2] [--seq-len 256] [--threads N] [--device cpu|cuda] [--tf32|--no-tf32]
        [--repeats 5]

Shape is tokens N, hidden H, vocab V (N = B * seq_len sequences, all tokens unmasked). Timed: the backend's
per-token log-probs and their backward under the on-policy policy gradient (-advantage x log-prob, token mean),
what the trainer hands TRL's loss; the loss's own [B, T] arithmetic is TRL's and the same for every backend. The
LM head weight is frozen (no weight gradient), as in LoRA or frozen-head training. Anchor `two_gemm`: `Z = h @ W.T` then
`Z @ W` in the input dtype (with `--dtype bf16`: two bf16 GEMMs, bf16 logits, what plain bf16 matmuls
cost), the arithmetic any exact method has to do, timed the same way.

`--device cuda` builds the inputs on the GPU and times there: per (backend, round) process one full-size
warm-up step, then `--repeats` steps, each between two CUDA events; `seconds` is the minimum over all of them,
`median_seconds` their median. `peak_mib` is `torch.cuda.max_memory_allocated()` growth over what is allocated
after the warm-up (the inputs; the peak statistics are reset there), `max_allocated_mib` the absolute peak.
TF32 (`--tf32`, the default on CUDA, as the GPU profiles' `tf32: true` sets it: `torch.set_float32_matmul_precision
("high")`; `--no-tf32`: "highest") applies to fp32 GEMMs. Without `--backends` every backend available on the
device runs (on CUDA: eager, chunked, fused, triton). The default `--device cpu` is the CPU benchmark
described below, unchanged (TF32 untouched unless asked).

`fused@VARIANT` runs `fused` with module switches of `posttrain.kernels.fused` (FUSED_VARIANTS), so
the alternatives are timed in the same invocation: `fused@tiles` (the torch tile loop instead of ATen's
CPU flash-attention kernel), `fused@upcast` (bf16 inputs: fp32 GEMMs on upcast chunks).

Each (backend, round) is a fresh subprocess: it builds the inputs, runs once untimed at a small token
count (imports, allocator warm-up), then times one full-size forward+backward. Rounds run round-robin
over the backends, so drifting machine load hits all of them alike; `seconds` is the minimum over rounds.
`peak_mib` is the peak resident-set growth over the inputs (the process's VmHWM, reset through
/proc/self/clear_refs after the inputs are built; a 2 ms RSS sampler where that is not writable), max
over rounds. One JSON line per backend: seconds, times, peak_mib, ratio_vs_eager, ratio_vs_two_gemm,
mem_ratio_vs_eager, loadavg (per round, the 1-minute load average when its timed step started; it includes
the benchmark's own earlier rounds, ~2 on an otherwise idle 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

FUSED_VARIANTS = {"tiles": {"CPU_FLASH": False}, "upcast": {"BF16_NATIVE": False}}


def _rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class _PeakRSS:
    """Peak RSS (KiB) between start() and stop(): kernel high-water mark if resettable, else sampling."""

    def start(self) -> None:
        self.base = _rss_kib()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.sampler = None
        except OSError:
            self.peak, self._stop = self.base, threading.Event()
            self.sampler = threading.Thread(target=self._sample, daemon=True)
            self.sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss_kib())

    def stop(self) -> float:
        """Peak growth in MiB."""
        if self.sampler is None:
            peak = _rss_kib("VmHWM")
        else:
            self._stop.set()
            self.sampler.join()
            peak = max(self.peak, _rss_kib())
        return (peak - self.base) / 1024.0


def _inputs(N, H, V, dtype, seq_len, seed=0, device="cpu"):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    kw = dict(generator=g, device=device)
    T = min(seq_len, N)
    B = N // T
    hidden = (torch.randn(B, T, H, **kw) * 0.5).to(dtype).requires_grad_()
    weight = torch.empty(V, H, dtype=dtype, device=device)
    for v0 in range(0, V, 16384):  # fill in slices: no [V, H] fp32 temporary for bf16
        weight[v0 : v0 + 16384] = torch.randn(min(16384, V - v0), H, **kw) * (H**-0.5)
    ids = torch.randint(0, V, (B, T), **kw)
    mask = torch.ones(B, T, dtype=torch.long, device=device)
    adv = torch.randn(B, **kw)
    old = -torch.rand(B, T, **kw) * 10 - 5
    ref = old + 0.1 * torch.randn(B, T, **kw)
    return hidden, weight, ids, mask, adv, old, ref


def _step(backend, hidden, weight, ids, mask, adv, old, ref):
    import torch

    if backend == "two_gemm":
        h2 = hidden.detach().reshape(-1, hidden.shape[-1])
        with torch.no_grad():
            z = h2 @ weight.t()
            out = z @ weight
        del z
        return out
    from posttrain.kernels import completion_logps

    logps = completion_logps(hidden, weight, ids, mask, backend=backend)
    # the on-policy policy gradient (every loss type's at ratio 1, up to per-token weights); what follows in TRL's
    # loss is [B, T] arithmetic, the same for every backend
    loss = -(adv[:, None] * logps * mask).sum() / mask.sum()
    loss.backward()
    return loss


def _time_cuda(backend: str, inputs: tuple, repeats: int) -> dict:
    """One full-size warm-up step, then `repeats` steps timed with CUDA events; peak memory over the inputs."""
    import torch

    hidden = inputs[0]
    _step(backend, *inputs)  # Triton compilation, cuBLAS heuristics, allocator
    hidden.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        hidden.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        _step(backend, *inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    peak = torch.cuda.max_memory_allocated()
    return {
        "seconds": min(times),
        "samples": times,
        "peak_mib": (peak - base) / 2**20,
        "max_allocated_mib": peak / 2**20,
    }


def worker(args) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32 is not None:  # as posttrain.hardware.profile applies a profile's `tf32: true`
        torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
    backend, _, variant = args.backend.partition("@")
    if variant:
        from posttrain.kernels import fused

        for name, value in FUSED_VARIANTS[variant].items():
            setattr(fused, name, value)
    N, H, V = args.shape
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    inputs = _inputs(N, H, V, dtype, args.seq_len, device=args.device)
    if args.device == "cuda":
        return {"backend": args.backend, **_time_cuda(backend, inputs, args.repeats), "loadavg": os.getloadavg()[0]}
    hidden, weight, ids, mask, adv, old, ref = inputs
    t = min(16, ids.shape[1])
    _step(
        backend,
        hidden[:1, :t].detach().clone().requires_grad_(),
        weight,
        ids[:1, :t],
        mask[:1, :t],
        adv[:1],
        old[:1, :t],
        ref[:1, :t],
    )  # warm-up: imports, first-call paths
    import gc

    gc.collect()
    load = os.getloadavg()[0]
    meter = _PeakRSS()
    meter.start()
    t0 = time.perf_counter()
    _step(backend, *inputs)
    seconds = time.perf_counter() - t0
    peak = meter.stop()
    return {"backend": args.backend, "seconds": seconds, "peak_mib": peak, "loadavg": load}


def _run_worker(backend: str, args) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "posttrain.bench.grpo_loss",
        "--worker",
        "--backend",
        backend,
        "--shape",
        ",".join(map(str, args.shape)),
        "--dtype",
        args.dtype,
        "--seq-len",
        str(args.seq_len),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--repeats",
        str(args.repeats),
    ]
    if args.tf32 is not None:
        cmd.append("--tf32" if args.tf32 else "--no-tf32")
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"backend": backend, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return json.loads(lines[-1])


def _best_of(runs: list[dict], digits: int) -> dict:
    """One backend's rounds: min seconds, seconds per round, max peak memory, load averages (CUDA: median of all
    timed repeats and the absolute peak too)."""
    out = {
        "seconds": min(r["seconds"] for r in runs),
        "times": [round(r["seconds"], digits) for r in runs],
        "peak_mib": round(max(r["peak_mib"] for r in runs), 1),
        "loadavg": [round(r["loadavg"], 2) for r in runs],
    }
    if all("samples" in r for r in runs):
        out["median_seconds"] = round(statistics.median(t for r in runs for t in r["samples"]), digits)
        out["max_allocated_mib"] = round(max(r["max_allocated_mib"] for r in runs), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m posttrain.bench grpo_loss",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--shape",
        required=True,
        type=lambda s: tuple(int(x) for x in s.split(",")),
        help="N,H,V: tokens, hidden size, vocabulary size",
    )
    p.add_argument("--backends", default=None, help="comma list (default: every backend native to this device)")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where inputs live and time is taken")
    p.add_argument(
        "--tf32",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="TF32 for fp32 GEMMs (default: on with --device cuda, as the GPU profiles; untouched on cpu)",
    )
    p.add_argument("--repeats", type=int, default=5, help="timed steps per process after a warm-up (cuda only)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.device == "cuda" and args.tf32 is None:
        args.tf32 = True
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: torch sees no CUDA device here")
    if args.backends is None:
        from posttrain.kernels.registry import native_backends

        args.backends = ",".join(native_backends(args.device))
    names = ["two_gemm"] + [b for b in args.backends.split(",") if b]
    bad = [b for b in names if "@" in b and b.removeprefix("fused@") not in FUSED_VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {bad}: only fused@{{{','.join(FUSED_VARIANTS)}}}")
    runs: dict[str, list[dict]] = {b: [] for b in names}
    for _ in range(args.rounds):
        for b in names:
            runs[b].append(_run_worker(b, args))
            print(json.dumps({"progress": runs[b][-1]}), file=sys.stderr, flush=True)
    digits = 6 if args.device == "cuda" else 3  # milliseconds on a GPU
    best = {}
    for b in names:
        ok = [r for r in runs[b] if "error" not in r]
        best[b] = None if not ok else _best_of(ok, digits)
    anchor, eager = best.get("two_gemm"), best.get("eager")
    failed = False
    for b in names:
        rec = {
            "bench": "grpo_loss",
            "backend": b,
            "shape": list(args.shape),
            "dtype": args.dtype,
            "threads": args.threads or None,
            "device": args.device,
            "tf32": args.tf32,
        }
        entry = best[b]
        if entry is None:
            failed = True
            rec["error"] = runs[b][-1].get("error")
        else:
            rec.update(seconds=round(entry["seconds"], digits), **{k: v for k, v in entry.items() if k != "seconds"})
            if eager:
                rec["ratio_vs_eager"] = round(entry["seconds"] / eager["seconds"], 3)
                rec["mem_ratio_vs_eager"] = round(entry["peak_mib"] / max(eager["peak_mib"], 1e-9), 4)
            if anchor:
                rec["ratio_vs_two_gemm"] = round(entry["seconds"] / anchor["seconds"], 3)
        print(json.dumps(rec), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
