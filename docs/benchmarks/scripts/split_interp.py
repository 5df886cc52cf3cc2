"""bf16's chunk-local backward form (E-form) on fp16 inputs through the CPU interpreter, its intra-chunk sums at three
product precisions: both operands rounded to TF32 ("tf32rn"), only the A side rounded and B split in two
("tf32split", bf16's table since e17a23d), fp32 ("ieee"). Pre-gated, no state; every output and gradient's relative
RMSE against the fp64 oracle, pooled over 3 seeds.

    TRITON_INTERPRET=1 PYTHONPATH=. python3 docs/benchmarks/scripts/split_interp.py [T H D]   (default 128 2 32)
"""
import sys

import torch

from reference.harness import make_inputs
from tests.test_vs_fla import compare
from triton_kda import chunk_bwd, chunk_kda
from triton_kda.configs import BwdPrecision


def variant(intra: str):
    def fn(**kw):
        chunk_bwd.bwd_precision_of = lambda dtype, gate=0: BwdPrecision("tf32rn", intra, "tf32x3", False)
        return chunk_kda(**kw)
    return fn


T, H, D = (int(x) for x in (sys.argv[1:4] or (128, 2, 32)))
cases = [make_inputs(1, T, H, H, D, D, dtype=torch.float16, gate="logsigmoid", use_qk_l2norm_in_kernel=True, seed=s)
         for s in range(3)]
for name, errs in compare(cases, {p: variant(p) for p in ("tf32rn", "tf32split", "ieee")}).items():
    print(name, " ".join(f"{n} {e:.3e}" for n, e in errs.items()))
