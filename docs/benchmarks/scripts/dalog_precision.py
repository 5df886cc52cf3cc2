"""Where the bf16 dA_log error of kda-check's B2-T777-H4 softplus-gate configuration comes from (one GPU call).

    python3 docs/benchmarks/scripts/dalog_precision.py [--seeds 6] [--fp32 h dh h/dh] [--no-fla] [--no-timing]

For several seeds of that configuration's inputs (kda-check draws seed 0), the relative RMSE against the fp64 oracle of
dA_log, ddt_bias, dg, dq and dk for: ours as shipped, ours with the backward's recomputed states h and/or their
gradients dh kept in fp32 (`grad_state_dtype` patched), and fla. Then the cost of fp32 states: fwd+bwd time and peak
memory at B2 T8192 H32 (Kimi flags) for each variant.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util

import torch

from reference.harness import make_inputs, rel_rmse
from reference.kda import kda_recurrent
from triton_kda import chunk, chunk_kda, state
from triton_kda.check.grid import CheckConfig
from triton_kda.check.runner import GRAD_NAMES, upstream_grads

CONFIG = CheckConfig(2, 777, 4, 4, 128, 128, dtype="bf16", use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                     initial_state=True, output_final_state=True)
SHOWN = ("dA_log", "ddt_bias", "dg", "dq", "dk")


@contextlib.contextmanager
def fp32_states(which: str):
    """which: "" (as shipped), "h" (the recomputed states h in fp32), "dh" (their gradients), "h/dh" (both)."""
    saved = chunk.grad_state_dtype, state.grad_state_dtype
    fp32 = lambda dtype: torch.float32  # noqa: E731
    if "h" in which.split("/"):
        chunk.grad_state_dtype = fp32
    if "dh" in which.split("/"):
        state.grad_state_dtype = fp32
    try:
        yield
    finally:
        chunk.grad_state_dtype, state.grad_state_dtype = saved


def inputs(seed: int) -> dict:
    c = CONFIG
    return make_inputs(c.B, c.T, c.H, c.HV, c.K, c.V, dtype=c.torch_dtype, device="cuda", gate="raw",
                       use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, initial_state=True,
                       output_final_state=True, seed=seed)


def grads(fn, kwargs: dict, upstream: list, dtype) -> dict:
    names = [n for n in GRAD_NAMES if isinstance(kwargs.get(n), torch.Tensor) and kwargs[n].is_floating_point()]
    leaves = {n: kwargs[n].detach().to(dtype or kwargs[n].dtype).requires_grad_(True) for n in names}
    o, ht = fn(**(kwargs | leaves))
    cots = [u.to(t.dtype) for u, t in zip(upstream, (o, ht), strict=True)]
    gs = torch.autograd.grad([o, ht], [leaves[n] for n in names], cots)
    return {GRAD_NAMES[n]: g for n, g in zip(names, gs, strict=True)}


def errors(args) -> None:
    impls = {"ours": (chunk_kda, "")} | {f"ours, fp32 {w}": (chunk_kda, w) for w in args.fp32}
    if not args.no_fla and importlib.util.find_spec("fla") is not None:
        from fla.ops.kda import chunk_kda as fla_chunk_kda
        impls["fla"] = (fla_chunk_kda, "")
    print(f"{CONFIG.id}: relative RMSE vs the fp64 oracle")
    print(f"{'seed':>4}  {'impl':<16}" + "".join(f"{n:>10}" for n in SHOWN))
    worst = {name: {n: 0.0 for n in SHOWN} for name in impls}
    for seed in range(args.seeds):
        kw = inputs(seed)
        o, ht = kda_recurrent(**{k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                                 for k, v in kw.items()})
        up = upstream_grads(CONFIG, {"o": o, "final_state": ht}, torch.device("cuda"))
        ref = grads(kda_recurrent, kw, up, torch.float64)
        for name, (fn, which) in impls.items():
            with fp32_states(which):
                got = grads(fn, kw, up, None)
            errs = {n: float(rel_rmse(got[n], ref[n])) for n in SHOWN}
            for n in SHOWN:
                worst[name][n] = max(worst[name][n], errs[n])
            print(f"{seed:>4}  {name:<16}" + "".join(f"{errs[n]:>10.2e}" for n in SHOWN))
    for name, w in worst.items():
        print(f"{'max':>4}  {name:<16}" + "".join(f"{w[n]:>10.2e}" for n in SHOWN))


def timing(variants: list[str]) -> None:
    from triton.testing import do_bench

    kw = make_inputs(2, 8192, 32, 32, 128, 128, dtype=torch.bfloat16, device="cuda", gate="raw",
                     use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                     use_beta_sigmoid_in_kernel=True, seed=0)
    kw["safe_gate"] = True
    leaves = {n: kw[n].detach().requires_grad_(True) for n in ("q", "k", "v", "g", "beta")}
    do = torch.randn_like(kw["v"])

    def fwdbwd():
        o, _ = chunk_kda(**(kw | leaves))
        torch.autograd.grad(o, list(leaves.values()), do)

    for which in ["", *variants]:
        with fp32_states(which):
            fwdbwd()
            torch.cuda.reset_peak_memory_stats()
            ms = do_bench(fwdbwd, warmup=50, rep=500, return_mode="median")
            peak = torch.cuda.max_memory_allocated() / 2**30
        print(f"B2-T8192-H32 kimi fwd+bwd, fp32 {which or 'none'}: {ms:.3f} ms, peak {peak:.2f} GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--fp32", nargs="*", default=["h/dh"], choices=["h", "dh", "h/dh"],
                    help="variants with these backward states in fp32 (default: h/dh)")
    args = ap.parse_args()
    errors(args)
    if not args.no_timing:
        timing(args.fp32)


if __name__ == "__main__":
    main()
