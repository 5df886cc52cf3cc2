"""Kernel times of the no-grad forward: the compiled 16-token path (mma.sync and wgmma recurrences), the 64-token
recurrence on wgmma after Triton's intra forward (`TRITON_KDA_SM90_FWD=v2`) and Triton alone.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-28_state64/state64_times.py [--shapes B2-T8192-H32] \
        [--modes sm90,sm90_v2]

Per shape and mode (the default dispatch: `sm90`, 16-token recurrence on mma.sync; the same on wgmma; `sm90_v2`:
Triton's intra forward, then the 64-token recurrence on wgmma; Triton alone): the forward's median time (do_bench),
each kernel's mean CUDA time over 20 calls (torch.profiler), the backend that served, and o's largest difference
from the default's.
"""
import argparse
import os
from collections import defaultdict

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from triton_kda import backend_report, chunk_kda

MODES = (("sm90", dict()),
         ("sm90-wgmma16", dict(TRITON_KDA_SM90_STATE="wgmma")),
         ("sm90_v2", dict(TRITON_KDA_SM90_FWD="v2")),
         ("triton", dict(TRITON_KDA_SM90="0")))
KEYS = ("TRITON_KDA_SM90_STATE", "TRITON_KDA_SM90_FWD", "TRITON_KDA_SM90", "TRITON_KDA_SM90_BLOCK_V")


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
    p.add_argument("--modes", default=",".join(name for name, _ in MODES))
    args = p.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for text in args.shapes.split(","):
        kw = make_case_inputs(parse_shape(text), FLAG_SETS[args.flags], device=dev, seed=0, requires_grad=False)
        base = None
        for name, env in MODES:
            if name not in args.modes.split(","):
                continue
            for key in KEYS:
                os.environ.pop(key, None)
            os.environ.update(env)
            with torch.no_grad():
                fn = lambda kw=kw: chunk_kda(**kw)  # noqa: E731
                o = fn()[0]
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
                ks = kernel_times(fn)
            diff = "" if base is None else f" max|o - sm90| {(o.float() - base.float()).abs().max().item():.3e}"
            base = o if base is None else base
            print(f"{text} {name}: {ms * 1e3:.1f} us{diff}; {backend_report()[-1]}")
            for k, us in ks.items():
                print(f"    {us:9.1f} us  {k[:110]}")


if __name__ == "__main__":
    main()
