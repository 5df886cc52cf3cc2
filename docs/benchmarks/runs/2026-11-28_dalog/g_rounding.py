"""fp32's gate gradient and the fp32 gate cumsum G, through the CPU interpreter (2026-11-28).

    TRITON_INTERPRET=1 PYTHONPATH=. python docs/benchmarks/runs/2026-11-28_dalog/g_rounding.py

For the unsaturated lower-bound and masked regimes (one sequence, H = HV = 4, K = V = 32, T64, seeds 0-1):
- "oracle, fp32 G": the fp64 oracle's dg when it is fed the gates the kernels effectively see where G is stored in
  fp32 (G_i = log2(e) cumsum of the chunk's gates, rounded to fp32; each gate the difference of neighbours), against
  the exact oracle: what fp32 storage of G alone costs dg;
- "ours": our chunk_kda's errors (dq, dk, dg, dA_log, ddt_bias relative RMSE) with this tree's code.
Run it on a tree with `no_diagonal.patch` applied (`git apply`) for the span kernel with its diagonal pairs in the
row and column sums, or with PYTHONPATH at another commit's tree.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from reference.harness import cotangents, regime_inputs, run_case  # noqa: E402
from reference.kda import kda_gate_ref, kda_recurrent, kda_recurrent_gated  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402

LN2 = 0.6931471805599453


def oracle_dg(d, gate, do, dht):
    """dg of the fp64 oracle run on the activated gate `gate` (fp64), through the raw gate's derivative."""
    gate = gate.detach().clone().requires_grad_(True)
    kw = {k: v for k, v in d.items() if k not in ("safe_gate", "cu_seqlens_cpu")}
    kw.update({n: d[n].double() for n in ("q", "k", "v", "beta", "initial_state")}, g=gate, use_gate_in_kernel=False)
    o, ht = kda_recurrent(**kw)
    dgate, = torch.autograd.grad([o, ht], [gate], [do.double(), dht.double()])
    g = d["g"].double()
    _, dx = torch.func.jvp(lambda x: kda_gate_ref(x, d["A_log"].double(), d["dt_bias"].double(), d.get("lower_bound")),
                           (g,), (torch.ones_like(g),))
    return dgate * dx


def fp32_g(gate, BT=64):
    """The gates whose chunk cumsums are G rounded to fp32 (one sequence, chunks of BT)."""
    out = gate.clone()
    for c in range(0, gate.shape[1], BT):
        G = (gate[:, c:c + BT].cumsum(1) / LN2).float().double()
        out[:, c:c + BT] = torch.diff(G, dim=1, prepend=torch.zeros_like(G[:, :1])) * LN2
    return out


def rel(a, r):
    return float((a.double() - r).norm() / r.norm())


def main():
    torch.set_num_threads(1)
    for regime in ("unsaturated", "masked"):
        for s in range(2):
            d = regime_inputs(regime, "heads", torch.float32, s, K=32, V=32, T=64, device="cpu")
            do, dht = cotangents(d, s)
            kw = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in d.items()
                  if k not in ("safe_gate", "cu_seqlens_cpu")}
            leaves = {n: kw[n].clone().requires_grad_(True)
                      for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")}
            o, ht, gate = kda_recurrent_gated(**{**kw, **leaves})
            grads = torch.autograd.grad([o, ht], list(leaves.values()), [do.double(), dht.double()])
            ref = dict(zip(leaves, grads, strict=True))
            exact = oracle_dg(d, gate, do, dht)
            got = run_case(chunk_kda, d, do, dht)
            ours = " ".join(f"d{n} {rel(got[n], ref[n]):.1e}" for n in ("q", "k", "g", "A_log", "dt_bias"))
            print(f"{regime} seed {s}: oracle, fp32 G: dg {rel(oracle_dg(d, fp32_g(gate), do, dht), exact):.1e} | "
                  f"ours: {ours}", flush=True)

if __name__ == "__main__":
    main()
