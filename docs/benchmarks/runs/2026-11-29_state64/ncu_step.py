"""One bf16 training step (forward + backward, Kimi flags, default dispatch) between cudaProfilerStart / Stop, after
two warm-up steps, for ncu --profile-from-start off.

    ncu --profile-from-start off --clock-control none --metrics ... python3 ncu_step.py B2-T8192-H32
"""
import sys

import torch

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from triton_kda import backend_report, chunk_kda

kw = make_case_inputs(parse_shape(sys.argv[1]), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                      requires_grad=True)
do = torch.randn_like(kw["v"])
for step in range(3):
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
    o = chunk_kda(**kw)[0]
    o.backward(do)
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
print([e.name for e in backend_report()[-4:]])
