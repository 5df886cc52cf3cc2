"""Host-side time of one decode step of ours (Python validation and launch preparation, the kernel launch replaced by
a no-op), on any machine: the part of `benchmarks.decode`'s do_bench figures that CUDA graphs remove.

    TRITON_INTERPRET=1 python3 docs/benchmarks/scripts/decode_host_overhead.py [--B 64] [--calls 500]

Prints microseconds per call (Kimi flags, bf16, H = HV = 32, K = V = 128, T = 1, a pool of 1024 slots,
check_indices=False as in the benchmark) and the functions that take the most time (cProfile).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.getcwd())

import triton_kda.recurrent as recurrent  # noqa: E402
from benchmarks import decode  # noqa: E402
from benchmarks.suites import FLAG_SETS, Shape  # noqa: E402


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    recurrent._kda_recurrent_fwd_kernel = _NoLaunch()
    shape = Shape(B=args.B, T=1, H=32, HV=32)
    inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], torch.device("cpu"))
    pool, idx = decode.make_pool(shape, 1024, torch.device("cpu"))
    with torch.no_grad():
        for _ in range(50):
            decode.ours(inputs, pool, idx)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            decode.ours(inputs, pool, idx)
        print(f"host time per call: {(time.perf_counter() - t0) / args.calls * 1e6:.1f} us")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            decode.ours(inputs, pool, idx)
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
