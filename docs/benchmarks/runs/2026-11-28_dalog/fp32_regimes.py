"""fp32 errors of every gradient over the gate regimes at small shapes, through the CPU interpreter (2026-11-28).

    TRITON_INTERPRET=1 PYTHONPATH=. python docs/benchmarks/runs/2026-11-28_dalog/fp32_regimes.py [--seeds 4]

One line per (regime, layout, seed), K = V = 32, T = 64 (regime_inputs, CPU draws): the relative RMSE of dq, dk, dv,
dbeta and dg against the fp64 oracle; for dA_log and ddt_bias their relative RMSE, the condition number of the sum
(cond: ||sum of |terms| per element|| / ||the sum||, the oracle's) and their error over the oracle's sum of |terms|
(rel_terms = rel_rmse / cond), and cond x the dg error beside the dA_log error (the bound a sum of terms each as
exact as dg reaches). Run with PYTHONPATH pointing at another tree's triton_kda to compare two codes.
"""
import argparse
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from reference.harness import GATE_REGIMES, LAYOUTS, cotangents, oracle_case_and_terms, regime_inputs, run_case  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402


def rel(a, r):
    return float((a.double() - r).norm() / r.norm())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    print("regime layout seed | dq dk dv dbeta dg | dA_log: rel_rmse cond rel_terms cond*dg | ddt_bias: rel_rmse cond "
          "rel_terms")
    worst = {}
    for regime in GATE_REGIMES:
        for layout in LAYOUTS:
            for s in range(args.seeds):
                d = regime_inputs(regime, layout, torch.float32, s, K=32, V=32, T=64, device="cpu")
                do, dht = cotangents(d, s)
                ref, terms = oracle_case_and_terms(d, do, dht)
                got = run_case(chunk_kda, d, do, dht)
                e = {n: rel(got[n], ref[n]) for n in ("q", "k", "v", "beta", "g", "A_log", "dt_bias")}
                cond = {n: float(terms[n].norm() / ref[n].norm()) for n in ("A_log", "dt_bias")}
                rt = {n: e[n] / cond[n] for n in cond}
                for n, x in {**e, "A_log_terms": rt["A_log"], "dt_bias_terms": rt["dt_bias"]}.items():
                    worst[n] = max(worst.get(n, 0.0), x)
                print(f"{regime} {layout} {s} | " + " ".join(f"{e[n]:.1e}" for n in ("q", "k", "v", "beta", "g"))
                      + f" | {e['A_log']:.1e} {cond['A_log']:.0f} {rt['A_log']:.1e} {cond['A_log'] * e['g']:.1e}"
                      + f" | {e['dt_bias']:.1e} {cond['dt_bias']:.0f} {rt['dt_bias']:.1e}", flush=True)
    print("worst: " + " ".join(f"{n} {x:.1e}" for n, x in worst.items()))


if __name__ == "__main__":
    main()
