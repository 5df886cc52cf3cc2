"""Kernel times of the no-grad forward (the compiled inference path) with the recurrence on mma.sync and on wgmma.

    cd <tree of wip/wgmma-state> && PYTHONPATH=$PWD python3 state_times.py [--shapes B2-T8192-H32,B1-T8192-H96]

Per shape and TRITON_KDA_SM90_STATE (mma, BV 64; mma, default BV; wgmma): the forward's median time
(do_bench), each kernel's mean CUDA time over 20 calls (torch.profiler), the backend that served, and o's largest
difference from the mma path's.
"""
import argparse
import os
from collections import defaultdict

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from triton_kda import backend_report, chunk_kda

MODES = (("mma-bv64", dict(TRITON_KDA_SM90_STATE="mma", TRITON_KDA_SM90_BLOCK_V="64")),
         ("mma-auto", dict(TRITON_KDA_SM90_STATE="mma")),
         ("wgmma", dict(TRITON_KDA_SM90_STATE="wgmma")))


def kernel_times(fn, steps=20):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    acc = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acc[e.name] += e.device_time / steps
    return dict(sorted(acc.items(), key=lambda kv: -kv[1]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="B2-T8192-H32,B1-T8192-H96")
    p.add_argument("--flags", default="kimi")
    args = p.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for text in args.shapes.split(","):
        kw = make_case_inputs(parse_shape(text), FLAG_SETS[args.flags], device=dev, seed=0, requires_grad=False)
        base = None
        for name, env in MODES:
            os.environ.pop("TRITON_KDA_SM90_BLOCK_V", None)
            os.environ.update(env)
            with torch.no_grad():
                fn = lambda kw=kw: chunk_kda(**kw)  # noqa: E731
                o = fn()[0]
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
                ks = kernel_times(fn)
            diff = "" if base is None else f" max|o - mma| {(o.float() - base.float()).abs().max().item():.3e}"
            base = o if base is None else base
            print(f"{text} {name}: {ms * 1e3:.1f} us{diff}; {backend_report()[-1]}")
            for k, us in ks.items():
                print(f"    {us:9.1f} us  {k[:110]}")


if __name__ == "__main__":
    main()
