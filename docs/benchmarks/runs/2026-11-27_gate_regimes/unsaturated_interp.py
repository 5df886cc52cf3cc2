"""bf16's chunk-local backward form (E-form) on fp16 inputs through the CPU interpreter, the unsaturated lower-bound
gate (`reference.harness`'s "unsaturated" draw, lower_bound -5, l2norm, states), its intra-chunk sums at four
product precisions: both operands rounded to TF32 ("tf32rn"), B operands as TF32 pairs on each block's own tokens
("tf32blocksplit", the lower-bound gate's since 2026-11-27), on every token ("tf32split"), fp32 ("ieee").

1. T128 H2 K=V=64, 3 seeds pooled: every output and gradient's relative RMSE against the fp64 oracle.
2. `tests/test_chunk_bwd.py::test_eform_split_products`'s unsaturated case (T128 K=V=32, seed 0): dg per precision.

    TRITON_INTERPRET=1 PYTHONPATH=. python3 docs/benchmarks/runs/2026-11-27_gate_regimes/unsaturated_interp.py
"""
import torch

import triton_kda.chunk_bwd
from reference.harness import make_inputs, pooled_errors, rel_rmse
from tests.test_chunk_bwd import SPLIT, _cotangents, _inputs, _kernel_grads, _oracle_grads
from triton_kda import chunk_kda
from triton_kda.configs import bwd_precision_of

PRECISIONS = ("tf32rn", "tf32blocksplit", "tf32split", "ieee")


def use(intra: str) -> None:
    """bf16's backward precisions (E-form) with the intra-chunk sums at `intra`, for every dtype."""
    bp = bwd_precision_of(torch.bfloat16, 2)._replace(intra=intra)
    triton_kda.chunk_bwd.bwd_precision_of = lambda dtype, gate=0, bp=bp: bp


def variant(intra: str):
    def fn(**kw):
        use(intra)
        return chunk_kda(**kw)
    return fn


cases = [make_inputs(1, 128, 2, 2, 64, 64, dtype=torch.float16, gate="unsaturated", use_gate_in_kernel=True,
                     lower_bound=-5.0, use_qk_l2norm_in_kernel=True, initial_state=True, output_final_state=True,
                     seed=s, device="cpu") | {"safe_gate": True} for s in range(3)]
for name, errs in pooled_errors(cases, {p: variant(p) for p in PRECISIONS}).items():
    print(name, " ".join(f"{n} {e:.2e}" for n, e in errs.items()), flush=True)

d, chunk_size, disable_recompute = _inputs(SPLIT[2], torch.float16)
do, dht = _cotangents(d, seed=0)
ref = _oracle_grads(d, do, dht)
for intra in PRECISIONS:
    use(intra)
    got = _kernel_grads(d, chunk_size, disable_recompute, do, dht)
    print(f"test case {intra}: dg {rel_rmse(got['g'], ref['g']):.2e}", flush=True)
