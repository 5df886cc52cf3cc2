"""Where the gate gradient loses precision on the GPU (one device call).

    python3 docs/benchmarks/scripts/gate_precision.py [--out DIR] [--no-fla] [--cases kimi,gva,fp16mask,fp32mask]

For each case, the relative RMSE against the fp64 oracle of every output and gradient, and of dgate (the gradient of
the activated gate, before the activation's chain rule; the oracle's from a pre-gated fp64 run), for ours as shipped,
for variants of ours with one precision choice changed by patching host code (IEEE fp32 products, fp32 states h,
fp32 state gradients dh, fp32 v_new, the WY backward's dA through the state), and for fla on the same inputs.
Cases: kimi (bf16 B1 T512 H4 K=V=128, l2norm, gate in kernel with A_log/dt_bias, safe_gate, lower_bound -5, beta
sigmoid, fp32 h0, dht), gva (the same with H2/HV8 and 5 sequences), fp16mask (fla's varlen test: fp16 H4 K=V=64,
cu_seqlens 0/256/500/1000, softplus gate, A_log = log U(1, 16), dt_bias ~ randn, 90% of raw gates -1000,
beta = sigmoid(rand), h0, dht), fp32mask (fp32, the softplus gate with half the raw gates -1000).
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.getcwd())

from reference.harness import rel_rmse  # noqa: E402
from reference.kda import kda_gate_ref, kda_recurrent  # noqa: E402
from triton_kda import chunk, chunk_bwd, chunk_kda, intra, state, wy  # noqa: E402

LN2 = math.log(2.0)
NAMES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def make_case(name: str, seed: int = 0) -> dict:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=dev).manual_seed(seed)

    def rn(*s):
        return torch.randn(*s, generator=gen, device=dev)

    def ru(*s):
        return torch.rand(*s, generator=gen, device=dev)

    if name in ("kimi", "gva"):
        dt = torch.bfloat16
        H, HV, K, V, T = (4, 4, 128, 128, 512) if name == "kimi" else (2, 8, 128, 128, 512)
        seqlens = None if name == "kimi" else [100, 37, 200, 64, 111]
        N = 1 if seqlens is None else len(seqlens)
        d = dict(q=rn(1, T, H, K).to(dt), k=rn(1, T, H, K).to(dt), v=rn(1, T, HV, V).to(dt),
                 g=rn(1, T, HV, K).to(dt), beta=rn(1, T, HV).to(dt),
                 A_log=torch.log(1 + 15 * ru(HV)), dt_bias=torch.log(torch.expm1(1e-3 + 0.099 * ru(HV * K))),
                 initial_state=rn(N, HV, K, V), output_final_state=True, use_qk_l2norm_in_kernel=True,
                 use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True)
    elif name == "fp16mask":
        dt = torch.float16
        H, K, V, T = 4, 64, 64, 1000
        seqlens = [256, 244, 500]
        g = rn(1, T, H, K)
        g = torch.where(ru(1, T, H, K) < 0.9, torch.full_like(g, -1000.0), g)
        d = dict(q=rn(1, T, H, K).to(dt), k=rn(1, T, H, K).to(dt), v=rn(1, T, H, V).to(dt), g=g.to(dt),
                 beta=torch.sigmoid(ru(1, T, H)).to(dt), A_log=torch.log(1 + 15 * ru(H)), dt_bias=rn(H * K),
                 initial_state=rn(3, H, K, V), output_final_state=True, use_qk_l2norm_in_kernel=True,
                 use_gate_in_kernel=True)
    elif name == "fp32mask":
        dt = torch.float32
        H, K, V, T = 2, 64, 64, 300
        seqlens = [130, 170]
        g = rn(1, T, H, K)
        g = torch.where(ru(1, T, H, K) < 0.5, torch.full_like(g, -1000.0), g)
        d = dict(q=rn(1, T, H, K), k=rn(1, T, H, K), v=rn(1, T, H, V), g=g, beta=torch.sigmoid(rn(1, T, H)),
                 A_log=torch.log(1 + 15 * ru(H)), dt_bias=rn(H * K), initial_state=rn(2, H, K, V),
                 output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)
    else:
        raise ValueError(name)
    if seqlens is not None:
        cu = torch.tensor([0] + list(torch.tensor(seqlens).cumsum(0).tolist()), dtype=torch.int64)
        d["cu_seqlens"], d["cu_seqlens_cpu"] = cu.to(dev), cu
    do = rn(*d["v"].shape).to(d["v"].dtype)
    dht = rn(*d["initial_state"].shape)
    return d, do, dht


def run_impl(fn, d, do, dht, spy=None):
    names = [n for n in NAMES if torch.is_tensor(d.get(n))]
    leaves = {n: d[n].detach().clone().requires_grad_(True) for n in names}
    kw = {**d, **leaves}
    o, ht = fn(**kw)[:2]
    gs = torch.autograd.grad([o, ht], [leaves[n] for n in names], [do, dht])
    out = {"o": o.detach(), "ht": ht.detach()}
    out.update({"d" + n: g for n, g in zip(names, gs)})
    return out


def oracle(d, do, dht):
    names = [n for n in NAMES if torch.is_tensor(d.get(n))]
    ref = {k: v for k, v in d.items() if k not in ("safe_gate", "cu_seqlens_cpu")}
    leaves = {n: d[n].detach().double().requires_grad_(True) for n in names}
    ref.update(leaves)
    o, ht = kda_recurrent(**ref)
    gs = torch.autograd.grad([o, ht], [leaves[n] for n in names], [do.double(), dht.double()])
    out = {"o": o.detach(), "ht": ht.detach()}
    out.update({"d" + n: g for n, g in zip(names, gs)})
    # dgate: gradient w.r.t. the activated gate (pre-gated fp64 run)
    gate = kda_gate_ref(d["g"].double(), d["A_log"].double(), d["dt_bias"].double(), d.get("lower_bound"))
    pre = {**ref, "g": gate.detach().requires_grad_(True), "use_gate_in_kernel": False, "lower_bound": None}
    pre.pop("A_log"), pre.pop("dt_bias")
    pre = {k: (v.detach() if torch.is_tensor(v) and k != "g" else v) for k, v in pre.items()}
    o2, ht2 = kda_recurrent(**pre)
    (dgate,) = torch.autograd.grad([o2, ht2], [pre["g"]], [do.double(), dht.double()])
    out["dgate"] = dgate
    return out


class GateSpy:
    """Captures what intra.gate_bwd receives and forms dgate (natural units) from it in fp64: per chunk, the reverse
    cumsum of dE plus the exclusive cumsum of dF."""

    def __init__(self):
        self.cap = None

    def __enter__(self):
        self.orig = intra.gate_bwd

        def spy(g, A_log, dt_bias, dE, dF, plan, BT, **kw):
            self.cap = (dE.double(), dF.double(), plan, BT)
            return self.orig(g, A_log, dt_bias, dE, dF, plan, BT, **kw)

        intra.gate_bwd = spy
        return self

    def __exit__(self, *a):
        intra.gate_bwd = self.orig

    def dgate(self, shape):
        dE, dF, plan, BT = self.cap
        out = torch.zeros_like(dE)
        ci = plan.chunk_indices.view(-1, 2).tolist()
        cu = plan.cu_seqlens.tolist()
        for n, c in ci:
            s = cu[n] + c * BT
            e = min(cu[n + 1], s + BT)
            out[s:e] = dE[s:e].flip(0).cumsum(0).flip(0) + dF[s:e].cumsum(0) - dF[s:e]
        return out.reshape(shape)


def patched_source(fn, old: str, new: str, module):
    src = inspect.getsource(fn)
    assert old in src, (fn.__name__, old)
    ns = {}
    exec(compile(src.replace(old, new), f"<patched {fn.__name__}>", "exec"), module.__dict__, ns)
    return ns[fn.__name__]


@contextlib.contextmanager
def variant(name: str):
    saved = []

    def setattr_(obj, attr, val):
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, val)

    parts = name.split("+")
    for p in parts:
        if p == "base":
            pass
        elif p == "ieee":
            f = lambda dt: "tf32x3" if dt == torch.float32 else "ieee"  # noqa: E731
            for module in (intra, state, wy):  # intra_fwd, state_fwd, wy_recompute
                setattr_(module, "precision_of", f)
            setattr_(chunk_bwd, "precision_of", f)
        elif p in ("tf32bwd", "a32", "s32"):  # fp16's backward products at TF32: all, the intra-chunk, the state-side
            fields = {"tf32bwd": ("products", "intra", "intra_state"), "a32": ("intra",), "s32": ("intra_state",)}[p]
            orig = chunk_bwd.bwd_precision_of
            setattr_(chunk_bwd, "bwd_precision_of", lambda dt, gate=0, _o=orig, _f=fields: _o(dt, gate)._replace(
                **{f: "tf32" for f in _f}) if dt == torch.float16 else _o(dt, gate))
        elif p == "h32":
            setattr_(chunk, "grad_state_dtype", lambda dt: torch.float32)
        elif p == "dh32":
            setattr_(state, "grad_state_dtype", lambda dt: torch.float32)
        elif p == "vnew32":
            setattr_(chunk, "state_fwd", patched_source(
                state.state_fwd, "v_new = torch.empty(TT, HV, V, device=dev, dtype=dt)",
                "v_new = torch.empty(TT, HV, V, device=dev, dtype=torch.float32)", state))
        elif p == "viastate":
            setattr_(chunk_bwd, "wy_bwd", patched_source(wy.wy_bwd, 'VIA_STATE=k.dtype == torch.float32',
                                                         "VIA_STATE=True", wy))
        else:
            raise ValueError(p)
    try:
        yield
    finally:
        for obj, attr, val in reversed(saved):
            setattr(obj, attr, val)


def errs(got, ref):
    return {k: rel_rmse(got[k].float(), ref[k]) for k in got if k in ref}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cases", default="kimi,gva,fp16mask,fp32mask")
    ap.add_argument("--variants", default="old,base,h32+dh32+vnew32+viastate")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--fla-cases", default="kimi,fp16mask")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--seeds", type=int, default=1, help="input seeds per case (cases are labelled case/s<seed>)")
    args = ap.parse_args()
    t0 = time.time()
    fla = None
    if not args.no_fla:
        try:
            from fla.ops.kda import chunk_kda as fla
        except Exception as e:
            log("fla not importable", e)
    rows = []
    jsonl = open(os.path.join(args.out, "gate_precision.jsonl"), "w")

    def emit(row):
        rows.append(row)
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        log(row["case"], row["impl"], json.dumps({k: (f"{v:.2e}" if isinstance(v, float) else v) for k, v in row.items()
                                                  if k not in ("case", "impl")}))

    data = {}
    labels = []
    for name in args.cases.split(","):
        for seed in range(args.seeds):
            case = f"{name}/s{seed}"
            labels.append(case)
            data[case] = make_case(name, seed)
            data[case] = (*data[case], oracle(*data[case]))
            log(case, "oracle done")
    for case in labels:
        d, do, dht, ref = data[case]
        for var in args.variants.split(","):
            if time.time() - t0 > args.budget_s:
                log("budget: skipping", case, var)
                continue
            try:
                if var == "old":  # the package as it was before this change, imported from .old/ (carried)
                    sys.path.insert(0, os.path.join(os.getcwd(), ".old"))
                    from triton_kda_old import chunk_kda as old_kda
                    got = run_impl(old_kda, d, do, dht)
                    e = errs(got, ref)
                else:
                    with variant(var), GateSpy() as spy:
                        got = run_impl(chunk_kda, d, do, dht)
                        got["dgate"] = spy.dgate(ref["dgate"].shape)
                    e = errs(got, ref)
                    if var == "base":
                        again = run_impl(chunk_kda, d, do, dht)
                        e["bitrepeat"] = float(all(torch.equal(again[k], got[k]) for k in again))
            except Exception as ex:
                traceback.print_exc()
                e = {"error": f"{type(ex).__name__}: {ex}"[:300]}
            emit({"case": case, "impl": f"ours:{var}", **e})
    for case in labels:
        if fla is None or case.split("/")[0] not in args.fla_cases.split(","):
            continue
        d, do, dht, ref = data[case]
        try:
            t1 = time.time()
            e = errs(run_impl(fla, d, do, dht), ref)
            e["seconds"] = time.time() - t1
        except Exception as ex:
            traceback.print_exc()
            e = {"error": f"{type(ex).__name__}: {ex}"[:300]}
        emit({"case": case, "impl": "fla", **e})
    cols = ["o", "ht", "dq", "dk", "dv", "dg", "dgate", "dbeta", "dA_log", "ddt_bias", "dinitial_state"]
    print("\n| case | impl | " + " | ".join(cols) + " |")
    for r in rows:
        print(f"| {r['case']} | {r['impl']} | " + " | ".join(
            f"{r[c]:.2e}" if isinstance(r.get(c), float) else str(r.get(c, r.get("error", "-"))[:20]) for c in cols)
            + " |")


if __name__ == "__main__":
    main()
