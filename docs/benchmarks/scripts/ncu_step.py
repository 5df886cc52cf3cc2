"""One fwd+bwd step of chunk_kda (Kimi Linear's flags) between cudaProfilerStart / Stop, after warm-up steps, for
Nsight Compute to read each launch of that step alone:

    ncu --clock-control none --profile-from-start off -k regex:_kda --section SpeedOfLight ... \
        python3 docs/benchmarks/scripts/ncu_step.py --shape B1-T8192-H16 --dtype fp32
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bwd_before_after import step  # noqa: E402
from bwd_variants import case, clear_grads  # noqa: E402

from triton_kda import chunk_kda  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="B1-T8192-H16")
    ap.add_argument("--dtype", default="fp32")
    args = ap.parse_args()
    d, do = case(args.shape, args.dtype)
    for _ in range(3):
        step(chunk_kda, d, do)
        clear_grads(d)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step(chunk_kda, d, do)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled one fwd+bwd step, {args.shape} {args.dtype}")


if __name__ == "__main__":
    main()
