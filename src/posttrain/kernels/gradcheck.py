"""Gradcheck CLI: one backend's per-token log-probs (and entropies) and their gradients against an fp64 eager reference.

    python -m posttrain.kernels.gradcheck kernels=fused temperature=0.7 weight_grad=true

Keys (defaults): kernels=fused, temperature=1.0, weight_grad=false, entropy=true (also the entropy, and its gradient
where the backend has one: `Backend.entropy_function`, `entropy_grad`), dtype=fp32 (fp32|bf16|fp64), B=4, T=6, H=16,
V=300, logit_std=4.0, empty_rows=1 (comma list of empty completion rows, "" for none), seed=0, token_block=8,
vocab_block=64 (tile sizes for fused/triton/pallas, small so the tiny problem spans many tiles; `logit_std` large
enough that the lazy softmax maximum is re-based).

What a backend owns is the log-probs and their backward; GRPO's loss on them is TRL's (`algos/grpo/kernel_logps`),
so a fixed random cotangent stands for any loss: `loss = sum(c * logp) + sum(d * entropy)`, and its gradient is the
backend's vector-Jacobian product. Inputs are drawn in fp64 with a fixed seed, cast to `dtype` for the kernel; the
reference is the `eager` backend on the fp64 values of exactly those (rounded) inputs, so only the kernel's own
error is measured. Printed: loss_ref, loss_kernel, abs_diff_loss, rel_diff_loss, max_abs_diff_logp,
max_abs_diff_entropy, max_abs_diff_dhidden, max_rel_diff_dhidden (and the dweight pair with weight_grad=true), then
PASS or FAIL and a JSON line. `max_rel_diff_*` is max|g - g_ref| / max|g_ref| (relative to the gradient's scale).

Gates (all must hold), with (loss_tol, grad_tol) = (1e-10, 1e-9) for fp64, (2e-5, 1e-4) for fp32 and
(1e-4, 1e-2) for bf16 inputs:
    rel_diff_loss = abs_diff_loss / max(1, |loss_ref|) <= loss_tol
    max_rel_diff_dhidden <= grad_tol       (and max_rel_diff_dweight <= grad_tol)
    kernel loss and gradients finite; masked positions get exactly zero hidden gradient.
The bf16 gates hold for kernels that upcast before the projection (log-softmax of fp32 logits; the
gradient itself is returned in bf16, ~4e-3 relative rounding); kernels that round the logits to bf16
fail them (TRL's chunked on CPU: off by tens of percent at logit std 4).
`--matrix` runs temperature 1 and 0.7 x weight gradient off and on x two empty-row patterns in one process.
Exit status: 0 pass, 1 gate failed, 3 backend not available here (e.g. no JAX), 4 bad arguments.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

import torch

from posttrain.kernels.registry import BACKENDS, available

DEFAULTS = dict(
    kernels="fused",
    temperature=1.0,
    weight_grad=False,
    entropy=True,
    dtype="fp32",
    B=4,
    T=6,
    H=16,
    V=300,
    logit_std=4.0,
    empty_rows="1",
    seed=0,
    token_block=8,
    vocab_block=64,
)
TOL = {"fp64": (1e-10, 1e-9), "fp32": (2e-5, 1e-4), "bf16": (1e-4, 1e-2)}  # (loss, grad)
DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}


def parse(argv: list[str]) -> dict:
    cfg = dict(DEFAULTS)
    for arg in argv:
        key, sep, val = arg.partition("=")
        key = key.lstrip("+").removeprefix("kernels.").replace("backend", "kernels")
        if not sep or key not in DEFAULTS:
            raise ValueError(f"bad argument {arg!r}: expected key=value with key in {sorted(DEFAULTS)}")
        default = DEFAULTS[key]
        if isinstance(default, bool):
            cfg[key] = val.lower() in ("1", "true", "yes")
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            cfg[key] = type(default)(float(val)) if isinstance(default, int) else float(val)
        else:
            cfg[key] = val
    if cfg["dtype"] not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}")
    return cfg


def make_inputs(cfg: dict) -> dict:
    """Fixed-seed fp64 inputs: ragged masks with empty rows, and the cotangents of log-probs and entropies."""
    g = torch.Generator().manual_seed(cfg["seed"])
    B, T, H, V = cfg["B"], cfg["T"], cfg["H"], cfg["V"]
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64) * (cfg["logit_std"] / H**0.5)
    ids = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    for r in (int(x) for x in str(cfg["empty_rows"]).split(",") if x.strip()):
        mask[r % B] = 0
    c_logp = torch.randn(B, T, generator=g, dtype=torch.float64)
    c_entropy = torch.randn(B, T, generator=g, dtype=torch.float64)
    return dict(hidden=hidden, weight=weight, ids=ids, mask=mask, c_logp=c_logp, c_entropy=c_entropy)


@contextlib.contextmanager
def _blocks(cfg: dict) -> Iterator[None]:
    """The kernels' tile sizes set to the case's, and restored after (`run` is also called in-process by tests)."""
    from . import fused, fused_device, pallas  # none imports triton or jax at module level

    saved = [(m, m.TOKEN_BLOCK, m.VOCAB_BLOCK) for m in (fused, fused_device, pallas)]
    flash_chunk = fused.FLASH_CHUNK
    for mod, _, _ in saved:
        mod.TOKEN_BLOCK, mod.VOCAB_BLOCK = cfg["token_block"], cfg["vocab_block"]  # type: ignore[attr-defined]
    fused.FLASH_CHUNK = cfg["vocab_block"]  # fused's CPU flash path: vocabulary chunks merged by log-sum-exp
    try:
        yield
    finally:
        for mod, token_block, vocab_block in saved:
            mod.TOKEN_BLOCK, mod.VOCAB_BLOCK = token_block, vocab_block  # type: ignore[attr-defined]
        fused.FLASH_CHUNK = flash_chunk


def _loss_and_grads(inputs: dict, cfg: dict, backend: str, dtype: torch.dtype, entropy: bool, entropy_grad: bool):
    from posttrain.kernels.loss import completion_logps, completion_logps_entropy

    h = inputs["hidden"].to(dtype).requires_grad_()
    w = inputs["weight"].to(dtype).requires_grad_(cfg["weight_grad"])
    args = (h, w, inputs["ids"], inputs["mask"])
    if entropy:
        logp, ent = completion_logps_entropy(*args, backend=backend, temperature=cfg["temperature"], grad=entropy_grad)
    else:
        logp, ent = completion_logps(*args, backend=backend, temperature=cfg["temperature"]), None
    out_dtype = logp.dtype
    loss = (inputs["c_logp"].to(out_dtype) * logp).sum()
    if ent is not None and entropy_grad:
        loss = loss + (inputs["c_entropy"].to(out_dtype) * ent).sum()
    targets = [h, w] if cfg["weight_grad"] else [h]
    grads = torch.autograd.grad(loss, targets)
    ent = None if ent is None else ent.detach().double()
    return loss.detach().double(), [g.double() for g in grads], logp.detach().double(), ent


def run(cfg: dict) -> tuple[int, dict]:
    backend = cfg["kernels"]
    ok, why = available(backend)
    if not ok:
        return 3, {"kernels": backend, "unavailable": why}
    inputs = make_inputs(cfg)
    dtype = DTYPES[cfg["dtype"]]
    row = BACKENDS[backend]
    entropy = cfg["entropy"] and row.entropy_function is not None
    entropy_grad = entropy and row.entropy_grad
    # the reference sees exactly the rounded values the kernel sees
    ref_inputs = {k: (v.to(dtype).double() if k in ("hidden", "weight") else v) for k, v in inputs.items()}
    loss_ref, grads_ref, logp_ref, ent_ref = _loss_and_grads(
        ref_inputs, cfg, "eager", torch.float64, entropy, entropy_grad
    )
    with _blocks(cfg):
        loss, grads, logp, ent = _loss_and_grads(inputs, cfg, backend, dtype, entropy, entropy_grad)
    tol, grad_tol = TOL[cfg["dtype"]]
    out = {
        "kernels": backend,
        "loss_ref": loss_ref.item(),
        "loss_kernel": loss.item(),
        "abs_diff_loss": (loss - loss_ref).abs().item(),
        "rel_diff_loss": (loss - loss_ref).abs().item() / max(1.0, abs(loss_ref.item())),
        "max_abs_diff_logp": (logp - logp_ref).abs().max().item(),
        "entropy_checked": entropy,
        "entropy_grad_checked": entropy_grad,
    }
    if ent is not None and ent_ref is not None:
        out["max_abs_diff_entropy"] = (ent - ent_ref).abs().max().item()
    names = ["dhidden", "dweight"][: len(grads)]
    for name, g, gr in zip(names, grads, grads_ref):
        diff = (g - gr).abs().max().item()
        out[f"max_abs_diff_{name}"] = diff
        out[f"max_rel_diff_{name}"] = diff / max(gr.abs().max().item(), 1e-30)
    failures = []
    if not (torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)):
        failures.append("non-finite loss or gradient")
    if out["rel_diff_loss"] > tol:
        failures.append(f"rel_diff_loss {out['rel_diff_loss']:.3e} > {tol:.1e}")
    for name in names:
        if out[f"max_rel_diff_{name}"] > grad_tol:
            failures.append(f"max_rel_diff_{name} {out[f'max_rel_diff_{name}']:.3e} > {grad_tol:.1e}")
    if grads[0][inputs["mask"] == 0].abs().sum() != 0:
        failures.append("non-zero hidden gradient at masked positions")
    out["failures"] = failures
    return (1 if failures else 0), out


MATRIX = [
    dict(temperature=t, weight_grad=wg, empty_rows=rows)
    for t in (1.0, 0.7)
    for wg in (False, True)
    for rows in ("1", "0,2")
]


def run_matrix(cfg: dict) -> int:
    """`--matrix`: every case of MATRIX in one process, a JSON line each; exit 1 if any fails."""
    worst = 0
    for case in MATRIX:
        code, out = run({**cfg, **case})
        print(json.dumps({**case, "exit": code, **out}), flush=True)
        worst = max(worst, 1 if code in (1, 3) else 0)
    return worst


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    if "--matrix" in argv:
        try:
            return run_matrix(parse([a for a in argv if a != "--matrix"]))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 4
    try:
        cfg = parse(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 4
    code, out = run(cfg)
    for key in (
        "loss_ref",
        "loss_kernel",
        "abs_diff_loss",
        "rel_diff_loss",
        "max_abs_diff_logp",
        "max_abs_diff_entropy",
        "max_abs_diff_dhidden",
        "max_rel_diff_dhidden",
        "max_abs_diff_dweight",
        "max_rel_diff_dweight",
    ):
        if key in out:
            print(f"{key}: {out[key]:.6e}")
    verdict = {
        0: "PASS",
        1: "FAIL: " + "; ".join(out.get("failures", [])),
        3: f"UNAVAILABLE: {out.get('unavailable')}",
    }[code]
    print(verdict)
    print(json.dumps({"config": cfg, **out, "exit": code}))
    return code


if __name__ == "__main__":
    sys.exit(main())
