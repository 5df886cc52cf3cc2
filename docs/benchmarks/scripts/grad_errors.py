"""CPU (interpreter): every gradient's relative RMSE vs the fp64 oracle on the backward test cases of
tests/test_chunk_bwd.py (fp32 cases, or the fp16 ones with `fp16`); run it on two checkouts to compare them.

    TRITON_INTERPRET=1 python docs/benchmarks/scripts/grad_errors.py [fp16]      (from the repo root)
"""
import sys

import torch

sys.path.insert(0, ".")
import tests.test_chunk_bwd as cases  # noqa: E402
from reference.harness import rel_rmse  # noqa: E402

dtype = torch.float16 if "fp16" in sys.argv[1:] else torch.float32
for params in cases.FP16_CASES if dtype == torch.float16 else cases.FP32_CASES:
    d, chunk_size, disable_recompute = cases._inputs(params, dtype)
    do, dht = cases._cotangents(d, seed=0)
    got = cases._kernel_grads(d, chunk_size, disable_recompute, do, dht)
    ref = cases._oracle_grads(d, do, dht)
    errors = " ".join(f"{name}:{rel_rmse(g, ref[name]):.1e}" for name, g in got.items())
    print(cases.case_id(**params, dtype=dtype), errors, flush=True)
