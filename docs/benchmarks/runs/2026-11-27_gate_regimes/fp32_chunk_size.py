"""fp32, the unsaturated lower-bound gate (log-decays over (-5, 0) per token) through the CPU interpreter: every
output and gradient's error against fp64 with 64- and 32-token chunks (B1 T128 H1 K=V=32, states, 2 seeds pooled).
The in-chunk gate cumsum G reaches a few hundred log2 units in a 64-token chunk; fp32 G then carries absolute errors
of about 1e-5, which decays between nearby tokens inherit.

    TRITON_INTERPRET=1 PYTHONPATH=. python3 docs/benchmarks/runs/2026-11-27_gate_regimes/fp32_chunk_size.py
"""
import torch

from reference.harness import make_inputs, pooled_errors
from triton_kda import chunk_kda

for bt in (64, 32):
    cases = [make_inputs(1, 128, 1, 1, 32, 32, dtype=torch.float32, gate="unsaturated", use_gate_in_kernel=True,
                         lower_bound=-5.0, use_qk_l2norm_in_kernel=True, initial_state=True, output_final_state=True,
                         seed=s, device="cpu") | {"safe_gate": True, "chunk_size": bt} for s in range(2)]
    errors = pooled_errors(cases, {"ours": chunk_kda})["ours"]
    print(f"BT{bt}", " ".join(f"{n} {e:.2e}" for n, e in errors.items()), flush=True)
