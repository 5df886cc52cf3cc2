"""Device time of each kernel of the no-grad forward (default dispatch, Kimi flags, bf16, seed 0, no states), from
torch.profiler over 10 calls, and the wall time per call (do_bench median).

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_order/kernel_times.py --batches 8192+128x64,8192 [--H 32]

A batch lists its sequences' lengths: ``8192+128x64`` is one sequence of 8192 tokens and 64 of 128.
"""
import argparse
from collections import defaultdict

import torch
import triton.testing

from benchmarks.suites import FLAG_SETS
from reference.harness import make_inputs
from triton_kda import backend_report, chunk_kda


def lengths(text: str) -> list[int]:
    out = []
    for part in text.split("+"):
        n, _, times = part.partition("x")
        out += [int(n)] * int(times or 1)
    return out


def row(text: str, H: int, calls: int = 10) -> str:
    seqlens = lengths(text)
    flags = FLAG_SETS["kimi"]
    kw = make_inputs(1, sum(seqlens), H, H, 128, 128, dtype=torch.bfloat16, device="cuda", seqlens=seqlens, seed=0,
                     **flags.make_kwargs)
    kw.update(flags.call_kwargs)
    with torch.no_grad():
        chunk_kda(**kw)
        wall = triton.testing.do_bench(lambda: chunk_kda(**kw), warmup=50, rep=300, return_mode="median") * 1e3
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                chunk_kda(**kw)
            torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name] += e.device_time / calls
    kernels = ", ".join(f"{name[:40]} {t:.1f}" for name, t in sorted(per.items(), key=lambda x: -x[1]) if t >= 1.0)
    return f"{text} H{H}: {wall:.1f} us a call ({backend_report()[-1].name}); kernels (us a call): {kernels}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", required=True)
    ap.add_argument("--H", type=int, default=32)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for text in args.batches.split(","):
        print(row(text, args.H), flush=True)


if __name__ == "__main__":
    main()
