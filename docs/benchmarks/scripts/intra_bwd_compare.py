"""The chunk-local backward kernel: an older version of triton_kda/intra.py against the current one, on the same
inputs, plus a launch-configuration sweep of the current kernel (end to end: env_e2e.py); see NOTES.md.

Run on the device from the repo root:
    git show <commit>:triton_kda/intra.py > /tmp/intra_old.py
    python3 docs/benchmarks/scripts/intra_bwd_compare.py --old /tmp/intra_old.py [--variant NAME=PATH ...]
        [--shape B,T,H,HV]
--old is timed with its own table entry (OLD_CFG), each --variant (another copy of intra.py, e.g. an ablation) with
the current table's entry. Configurations are compiled first in parallel worker processes, then timed in this one.
"""
import argparse
import importlib.util
import inspect
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402
import triton  # noqa: E402

import triton_kda.configs as C  # noqa: E402
import triton_kda.intra as ti  # noqa: E402
from triton_kda.chunk_fwd import plan_chunks  # noqa: E402
from triton_kda.intra import intra_fwd  # noqa: E402
from triton_kda.state import state_bwd, state_fwd  # noqa: E402

OLD_CFG = C.IntraConfig(BC=16, BK=64, BV=64, num_warps=4, num_stages=2)
SWEEP = [(64, 64, 8, 1), (64, 64, 8, 2), (64, 64, 4, 1), (64, 64, 4, 2), (32, 64, 4, 1), (32, 64, 4, 2),
         (128, 64, 8, 1), (64, 32, 4, 1), (64, 128, 8, 1)]
K = V = 128
BT = 64


def load_mod(path, cfg=None):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if cfg is not None:
        mod.intra_bwd_config = lambda arch, K, V: cfg
    return mod


def setup(B, T, H, HV):
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(B * T, H, K, device=dev, dtype=bf)
    k = torch.randn_like(q)
    v = torch.randn(B * T, HV, V, device=dev, dtype=bf)
    g = torch.randn(B * T, HV, K, device=dev, dtype=bf)
    beta = torch.randn(B * T, HV, device=dev, dtype=bf)
    A_log = torch.log(torch.rand(HV, device=dev) * 15 + 1)
    dt_bias = torch.randn(HV * K, device=dev) * 0.5
    do = torch.randn(B * T, HV, V, device=dev, dtype=bf)
    plan = plan_chunks(B, T, BT, q.device, None)
    kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
              use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
    intra = intra_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, plan, BT, **kw, store_aux=True)
    st = state_fwd(intra, None, plan, BT, V, output_final_state=False, state_v_first=False, store_h=True,
                   store_v_new=True, h_dtype=torch.bfloat16)
    sb = state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, do, None, plan, BT, V, want_dh0=False,
                   state_v_first=False, prec="tf32")
    wy = ti.wy_bwd(k, v, intra.Gc, intra.rstd_k, intra.beta, intra.Akk, st.h, st.v_new, sb.dv_new, do, plan, BT,
                   state_v_first=False, prec="tf32")

    def run(mod):
        """The module's intra_bwd on these inputs (an older intra.py recomputes G, a newer one reads intra.Gc)."""
        G = (intra.Gc,) if "Gc" in inspect.signature(mod.intra_bwd).parameters else ()
        return mod.intra_bwd(q, k, g, A_log, dt_bias, *G, intra.gl, intra.rstd_q, intra.rstd_k, intra.beta, st.h,
                             sb.dh, st.v_new, wy, do, K ** -0.5, plan, BT, gate=2, lower_bound=-5.0,
                             state_v_first=False, prec="tf32")
    return run


def with_cfg(cfg, fn):
    ti.intra_bwd_config = lambda arch, K, V: cfg
    try:
        return fn()
    finally:
        ti.intra_bwd_config = C.intra_bwd_config


def compile_one(args):
    """Worker: compile (and run once) one configuration of the current kernel, or a module's when cfg is None."""
    shape, cfg, path = args
    run = setup(*shape)
    t = time.time()
    try:
        if cfg is None:
            run(load_mod(path, OLD_CFG if path.endswith("_old.py") else None))
        else:
            with_cfg(C.IntraConfig(16, *cfg), lambda: run(ti))
        torch.cuda.synchronize()
        return f"{cfg or path}: compiled in {time.time() - t:.1f} s"
    except Exception as exc:
        return f"{cfg or path}: ERR {type(exc).__name__}: {str(exc)[:120]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="a copy of an older intra.py; its name must end in _old.py")
    ap.add_argument("--variant", action="append", default=[], help="NAME=PATH of another copy of intra.py")
    ap.add_argument("--shape", default="2,8192,32,32")
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--no-sweep", action="store_true", help="time only --old and the variants")
    a = ap.parse_args()
    shape = tuple(int(x) for x in a.shape.split(","))
    small = (1, 1024, *shape[2:])
    sweep = [] if a.no_sweep else SWEEP
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        paths = [a.old] + [v.split("=", 1)[1] for v in a.variant]
        jobs = [(small, None, p) for p in paths] + [(small, c, None) for c in sweep]
        for line in pool.imap(compile_one, jobs):
            print("compile", line, flush=True)
    run = setup(*shape)
    old = load_mod(a.old, OLD_CFG)

    def bench(f):
        return triton.testing.do_bench(f, warmup=30, rep=200, return_mode="median")
    ref = run(old)
    print(f"shape B,T,H,HV={shape} K=V={K} bf16, Kimi flags", flush=True)
    print(f"old kernel {OLD_CFG}: {bench(lambda: run(old)):.3f} ms", flush=True)
    for v in a.variant:
        name, path = v.split("=", 1)
        mod = load_mod(path)
        print(f"variant {name} {C.intra_bwd_config(90, K, V)}: {bench(lambda: run(mod)):.3f} ms", flush=True)
    for cfg in sweep:
        c = C.IntraConfig(16, *cfg)
        try:
            out = with_cfg(c, lambda: run(ti))
            err = max(((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item()
                      for x, y in zip(out[:3], ref[:3]))
            db = ((out.dbeta.sum(0) - ref.dbeta.sum(0)).abs().max() / ref.dbeta.sum(0).abs().max()).item()
            ms = with_cfg(c, lambda: bench(lambda: run(ti)))
            print(f"new kernel {cfg}: {ms:.3f} ms   max rel diff vs old: dq/dk/dg {err:.2e}, dbeta {db:.2e}",
                  flush=True)
        except Exception as exc:
            print(f"new kernel {cfg}: ERR {type(exc).__name__}: {str(exc)[:160]}", flush=True)


if __name__ == "__main__":
    main()
