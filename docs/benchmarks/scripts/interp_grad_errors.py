"""Per-gradient relative RMSE vs the fp64 oracle of tests/test_chunk_bwd.py's cases, through the CPU interpreter.

    python3 docs/benchmarks/scripts/interp_grad_errors.py fp32      # every FP32_CASES case (seed 0), worst / tolerance
    python3 docs/benchmarks/scripts/interp_grad_errors.py masked 3  # the masked strong-decay cases over seeds 0..2
    python3 docs/benchmarks/scripts/interp_grad_errors.py eform     # test_gate_gradient_eform's cases (bf16's form)
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402

torch.set_num_threads(1)
sys.path.insert(0, os.getcwd())
from tests import test_chunk_bwd as t  # noqa: E402
from tests.utils import case_id, rel_rmse  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "fp32"
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
if which == "masked":
    cases = t.MASKED + [t._case(T=90, H=2, HV=4, K=32, V=16, seqlens=[40, 50], gate="masked", use_gate_in_kernel=True,
                                use_qk_l2norm_in_kernel=True, chunk_size=64, **t.STATE)]
    tol = t.MASKED_TOL
elif which == "eform":
    import triton_kda.chunk_bwd as CB
    from triton_kda.configs import bwd_precision_of
    CB.bwd_precision_of = lambda dtype, gate=0: bwd_precision_of(dtype, gate)._replace(gate_span=False)
    cases, tol = t.EFORM, None
else:
    cases, tol = t.FP32_CASES, t.TOL[torch.float32]
for p in cases:
    for seed in range(seeds):
        d, cs, dr = t._inputs(p, torch.float32, seed=seed)
        do, dht = t._cotangents(d, seed=seed)
        got = t._kernel_grads(d, cs, dr, do, dht)
        ref = t._oracle_grads(d, do, dht)
        errs = {n: rel_rmse(got[n], ref[n]) for n in got}
        limits = tol or (t.MASKED_TOL if p in t.MASKED else t.TOL[torch.float32])
        worst = max(errs[n] / limits[n] for n in errs)
        print(case_id(**p), f"seed{seed}", f"worst/tol={worst:.2f}", " ".join(f"{n}={e:.2e}" for n, e in errs.items()),
              flush=True)
