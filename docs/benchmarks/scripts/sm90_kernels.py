"""Per-kernel GPU times of the sm90 CUDA forward and of the Triton forward (torch.profiler, 20 calls each).

Run on the device from the repo root: python3 docs/benchmarks/scripts/sm90_kernels.py [SHAPE ...]
SHAPE is B,T,H,HV (default: the standard suite's four shapes); TRITON_KDA_SM90_BLOCK_V=32|64 forces the
recurrence kernel's block; ONLY=sm90 (or triton) runs one backend (e.g. under ncu).
"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from benchmarks.cases import make_case_inputs  # noqa: E402
from benchmarks.impls import forced_backend  # noqa: E402
from benchmarks.suites import FLAG_SETS, Shape  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402

shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[1:]] or [
    (1, 8192, 16, 16), (2, 8192, 32, 32), (2, 8192, 64, 64), (8, 2048, 32, 32)]
for B, T, H, HV in shapes:
    kw = make_case_inputs(Shape(B=B, T=T, H=H, HV=HV), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                          requires_grad=False)
    for backend in [os.environ["ONLY"]] if os.environ.get("ONLY") else ("triton", "sm90"):
        fn = forced_backend(chunk_kda, backend)
        with torch.no_grad():
            for _ in range(3):
                fn(**kw)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn(**kw)
                torch.cuda.synchronize()
        totals = defaultdict(float)
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                totals[ev.name[:60]] += ev.device_time_total / 20 / 1000
        parts = " | ".join(f"{name} {ms:.3f}" for name, ms in sorted(totals.items(), key=lambda x: -x[1]))
        print(f"B{B} T{T} H{H} HV{HV} {backend}: total {sum(totals.values()):.3f} ms: {parts}", flush=True)
