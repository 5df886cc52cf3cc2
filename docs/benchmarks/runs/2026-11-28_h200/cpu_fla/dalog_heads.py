"""Per head of a gate-regime case (fp16, CPU interpreter), ours and fla-core 0.6.0: |dA_log error|, the spread
that the case's dg error would give dA_log's sum if its terms' errors were independent (sqrt of the sum of squared
term errors, terms = dg x (g + dt_bias), from the fp16 dg the call returns), and the oracle's sum of |terms|.

    TRITON_INTERPRET=1 PYTHONPATH=<fla copy>:<repo>:<this folder> python dalog_heads.py saturated heads 0,1,2
(fla_interp.py says how fla runs there.) K = V = 128, T = 512, as the GPU test; about 2.5 minutes per seed."""
import sys

import fla_interp  # noqa: F401  (first: the interpreter and fla's autotuner)
import torch
from fla.ops.kda import chunk_kda as fla

from reference.harness import cotangents, oracle_case_and_terms, regime_inputs, run_case
from triton_kda import chunk_kda

regime, layout = sys.argv[1], sys.argv[2]
for s in [int(v) for v in sys.argv[3].split(",")]:
    d = regime_inputs(regime, layout, torch.float16, s, K=128, V=128, T=512)
    do, dht = cotangents(d, s)
    ref, terms = oracle_case_and_terms(d, do, dht)
    HV = d["g"].shape[2]
    x = d["g"].double() + d["dt_bias"].double().view(HV, 128)
    for name, fn in (("ours", chunk_kda), ("fla", fla)):
        got = run_case(fn, d, do, dht)
        err = (got["A_log"].double() - ref["A_log"]).abs()
        e = ((got["g"].double() - ref["g"]) * x).flatten(0, 1)
        spread = e.square().sum((0, 2)).sqrt()
        heads = zip(err.tolist(), spread.tolist(), terms["A_log"].tolist(), strict=True)
        print(f"seed {s} {name:4s} " + "  ".join(f"{a:.2e} / {b:.2e} / {c:.3g}" for a, b, c in heads), flush=True)
