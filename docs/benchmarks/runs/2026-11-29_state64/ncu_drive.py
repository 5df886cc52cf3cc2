"""Drive the no-grad forward a few times for ncu (one shape, Kimi flags, bf16, seed 0); the mode is the environment's
(TRITON_KDA_SM90_FWD=v2: the 64-token recurrence; TRITON_KDA_SM90=0: Triton alone; neither: the default sm90).

    ncu --clock-control none --kernel-name regex:state --launch-skip 2 --launch-count 1 \
        python3 docs/benchmarks/runs/2026-11-29_state64/ncu_drive.py B2-T8192-H32
"""
import sys

import torch

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from triton_kda import backend_report, chunk_kda

kw = make_case_inputs(parse_shape(sys.argv[1]), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                      requires_grad=False)
with torch.no_grad():
    for _ in range(4):
        chunk_kda(**kw)
torch.cuda.synchronize()
print(backend_report()[-1])
