"""One bf16 step (forward + backward, or the no-grad forward with --fwd; Kimi flags, default dispatch) between
cudaProfilerStart / Stop, after two warm-up steps, for ncu --profile-from-start off. Gradients are reset before each
step (as benchmarks.cases does; call 8 ran without that, so its four elementwise adds are autograd accumulating).

    ncu --profile-from-start off --clock-control none --metrics ... python3 ncu_step.py B2-T8192-H32 [--fwd]
"""
import sys

import torch

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from triton_kda import backend_report, chunk_kda

fwd_only = "--fwd" in sys.argv
kw = make_case_inputs(parse_shape(sys.argv[1]), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                      requires_grad=not fwd_only)
do = torch.randn_like(kw["v"])
for step in range(3):
    for name in ("q", "k", "v", "g", "beta"):
        kw[name].grad = None
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
    if fwd_only:
        with torch.no_grad():
            chunk_kda(**kw)
    else:
        chunk_kda(**kw)[0].backward(do)
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
print([e.name for e in backend_report()[-4:]])
