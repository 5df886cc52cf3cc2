"""Each kernel of a fwd+bwd step (Triton, and the compiled backward) against its memory floor, for several copies of
the package side by side.

    python3 docs/benchmarks/scripts/kernel_roofline.py --pkg old=.var/old:triton_kda_old --pkg new=.:triton_kda
        [--shape B2-T8192-H32] [--dtype bf16]
    python3 docs/benchmarks/scripts/kernel_roofline.py --pkg triton=.:triton_kda@TRITON_KDA_SM90_BWD=0 \
        --pkg cuda=.:triton_kda@TRITON_KDA_SM90_BWD=1

A package spec may end in `@VAR=VALUE`: every step of that package sets the environment variable first (and leaves
it set: the backward reads it after the forward returns, and the next package sees it too, so give every package
its setting), e.g. the registry switch of the compiled backward.

Per kernel and package: its CUDA time per step (torch.profiler, `bwd_before_after.kernel_times`), the bytes of
the distinct tensors its launches take (every tensor argument counted once per launch, by address, so the
placeholders passed for absent arguments count once: the traffic of one read or write of each; the compiled
chunk-local backward of cuda_fast.sm90_bwd likewise, from the tensors whose pointers it passes), and that traffic
at the copy bandwidth measured in the same process (a 1 GiB device-to-device copy, 2 GiB moved) as the kernel's
floor; `% of floor` = floor / time. Products are not counted: the largest kernel's (the chunk-local backward's,
per chunk and v-head 4 blocks x (4 products of 16 x 64 x 128 + 3 of 16 x 128 x 128) x 2 FLOP, 86 GFLOP per step at
B2 T8192 H32 K = V = 128) take 0.17 ms at the H100's dense TF32 rate (494 TFLOP/s), below its bytes' time.
Kernels launched by torch (the gradient accumulation into .grad, casts) are listed with their time only.
The inputs and the step are `bwd_before_after.py`'s (Kimi Linear's flags). The last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bwd_before_after import kernel_times, step  # noqa: E402
from bwd_variants import case, clear_grads, load  # noqa: E402


def copy_bandwidth() -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write counted)."""
    src = torch.empty(2**28, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200)
    return 2 * src.nbytes / (ms * 1e-3)


COMPILED = "kda_intra_bwd_kernel<"  # the profiler's name of the compiled kernel starts so (templated per K and form)


def load_spec(spec: str):
    """NAME=DIR:MODULE[@VAR=VALUE] -> (NAME, chunk_kda that sets VAR=VALUE before each call)."""
    spec, _, env = spec.partition("@")
    name, fn = load(spec)
    if not env:
        return name, fn
    var, value = env.split("=", 1)

    def with_env(**kw):
        os.environ[var] = value
        return fn(**kw)

    return name, with_env


def launch_bytes(fn, d, do) -> dict:
    """Bytes of the distinct tensor arguments of every Triton launch of one fwd+bwd step, summed per kernel name,
    and of the compiled backward's launches (under COMPILED)."""
    import cuda_fast.sm90_bwd as sm90_bwd

    run = triton.runtime.jit.JITFunction.run
    ptr = sm90_bwd._ptr
    out = {}
    compiled = {}

    def recording_ptr(x):  # every tensor whose pointer a compiled launch passes
        if isinstance(x, torch.Tensor):
            compiled[x.data_ptr()] = max(compiled.get(x.data_ptr(), 0), x.numel() * x.element_size())
        return ptr(x)

    def counting(self, *args, **kwargs):
        seen = {}
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor):
                seen[a.data_ptr()] = max(seen.get(a.data_ptr(), 0), a.numel() * a.element_size())
        out[self.fn.__name__] = out.get(self.fn.__name__, 0) + sum(seen.values())
        return run(self, *args, **kwargs)

    triton.runtime.jit.JITFunction.run = counting
    sm90_bwd._ptr = recording_ptr
    try:
        step(fn, d, do)
        torch.cuda.synchronize()
    finally:
        triton.runtime.jit.JITFunction.run = run
        sm90_bwd._ptr = ptr
    clear_grads(d)
    if compiled:
        out[COMPILED] = sum(compiled.values())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkg", action="append", required=True)
    ap.add_argument("--shape", default="B2-T8192-H32")
    ap.add_argument("--dtype", default="bf16")
    args = ap.parse_args()
    fns = dict(load_spec(s) for s in args.pkg)
    bw = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    d, do = case(args.shape, args.dtype)
    rows = [f"{args.shape} {args.dtype}, per fwd+bwd step: us (torch.profiler, 10 steps), MB of distinct tensor "
            f"arguments, % of the floor (those bytes at {bw / 1e12:.2f} TB/s)",
            "| package | kernel | us | MB | floor us | % of floor |", "|---|---|---:|---:|---:|---:|"]
    totals = {}
    for name, fn in fns.items():
        nbytes = launch_bytes(fn, d, do)
        times = kernel_times(fn, d, do)
        clear_grads(d)
        tot_us = tot_floor = 0.0  # over our kernels
        for k, us in sorted(times.items(), key=lambda kv: -kv[1]):
            b = nbytes.get(COMPILED if COMPILED in k else k)
            floor = b / bw * 1e6 if b is not None else None
            if b is not None:
                tot_us += us
                tot_floor += floor
            rows.append(f"| {name} | {k[:50]} | {us:.1f} | "
                        + (f"{b / 1e6:.0f} | {floor:.1f} | {100 * floor / us:.0f}% |" if b is not None
                           else "- | - | - |"))
        rows.append(f"| {name} | our kernels | {tot_us:.1f} | | {tot_floor:.1f} | {100 * tot_floor / tot_us:.0f}% |")
        totals[name] = (tot_us, tot_floor)
    print("\n".join(rows))
    print("summary: " + "; ".join(f"{n} {us:.0f} us of our kernels per step, floor {fl:.0f} us "
                                  f"({100 * fl / us:.0f}%)" for n, (us, fl) in totals.items()), flush=True)


if __name__ == "__main__":
    main()
