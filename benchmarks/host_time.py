"""Host-side time of one training step (chunk_kda forward + backward under autograd), on any machine (no GPU
needed): the part of a step's wall time that is Python and launch bookkeeping rather than kernels.

    TRITON_INTERPRET=1 python -m benchmarks.host_time [--T 64] [--H 16] [--steps 200] [--op] [--profile]
    python -m benchmarks.host_time --gpu [--shapes B1-T4096-H32,B1-T8192-H16,B2-T8192-H32]

Kimi Linear's flags (l2norm, gate in kernel, safe_gate, lower_bound -5, beta sigmoid), B = 1, K = V = 128, fp32 CPU
tensors (the host path does not depend on the dtype but for the launch tables; T small so that the orchestration's
few torch ops cost little on the CPU). Every Triton kernel's launch is replaced by a stand-in that records it and
does nothing, so the time is that of validation, planning, allocation, the autograd and custom-op dispatch and the
orchestration's own torch ops, less Triton's launcher (its binder and cache key, about 10-20 us per launch on a GPU
machine) and the device / stream queries. Prints microseconds per step (best of 5 rounds) and the launches per
step; `--profile` adds a cProfile of steps sorted by own time. `--op` sends eager calls through the custom op as
torch.compile does (`triton_kda.ops.forward` replaced by `ops.chunk_kda_fwd`) instead of the autograd.Function that
eager calls take. The stand-ins stay installed: run it in its own process.

`--gpu` measures real steps on a CUDA GPU instead (bf16, B1..B2 shapes, K = V = 128), ours and fla's where fla is
importable: per shape the do_bench median; the host time per step (wall time to enqueue 20 steps without
synchronizing, over 20: below the launch queue's depth, so the host waits on nothing unless a call synchronizes);
the GPU time per step (CUDA events around 20 steps enqueued back to back, the GPU's idle gaps included); and the
synchronizing calls of one step (`torch.cuda.set_sync_debug_mode`). A step whose host time reaches its do_bench
time is host-bound.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import pkgutil
import pstats
import sys
import time
import timeit
import warnings

import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

import triton_kda
from benchmarks.roofline import KIMI, step_inputs, step_shape
from benchmarks.roofline import step as roofline_step
from triton_kda.chunk import chunk_kda


class _StandIn:
    """A JIT kernel whose launch records its name and does nothing."""

    def __init__(self, name: str, launches: list[str]):
        self.name, self.launches = name, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(self.name)
        return launch


def stub_kernels(launches: list[str]) -> int:
    """Replace every `*_kernel` JIT function of triton_kda's modules by a recording stand-in; returns how many."""
    n = 0
    for info in pkgutil.iter_modules(triton_kda.__path__):
        mod = importlib.import_module(f"triton_kda.{info.name}")
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, (JITFunction, InterpretedFunction)) and name.endswith("_kernel"):
                setattr(mod, name, _StandIn(name, launches))
                n += 1
    return n


def gpu_row(fn, d: dict, do: torch.Tensor, n: int = 20) -> tuple[float, float, float, int]:
    """(do_bench ms, host ms, GPU ms, synchronizing calls) of the fwd+bwd step of `fn` on CUDA inputs `d`."""
    from triton.testing import do_bench

    def step():
        roofline_step(fn, d, do)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    host = (time.perf_counter() - t0) / n * 1e3
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        step()
    b.record()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("called a synchronizing" in str(w.message) for w in caught)
    return do_bench(step, warmup=10, rep=100), host, a.elapsed_time(b) / n, syncs


def gpu_main(shapes: str) -> int:
    if not torch.cuda.is_available():
        print("benchmarks.host_time --gpu needs a CUDA GPU", file=sys.stderr)
        return 2
    fns = {"ours": chunk_kda}
    try:
        from fla.ops.kda import chunk_kda as fla_chunk_kda

        fns["fla"] = fla_chunk_kda
    except ImportError:
        pass
    print(f"{torch.cuda.get_device_name()}; ms per bf16 fwd+bwd step, Kimi flags")
    print("| shape | impl | do_bench | host | GPU (events) | synchronizing calls |\n|---|---|---:|---:|---:|---:|")
    for text in shapes.split(","):
        d, do = step_inputs(step_shape(text), torch.bfloat16)
        for name, fn in fns.items():
            med, host, gpu, syncs = gpu_row(fn, d, do)
            print(f"| {text} | {name} | {med:.3f} | {host:.3f} | {gpu:.3f} | {syncs} |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=64, help="tokens (B = 1)")
    ap.add_argument("--H", type=int, default=16, help="heads (H = HV)")
    ap.add_argument("--steps", type=int, default=200, help="steps per timed round")
    ap.add_argument("--op", action="store_true", help="eager calls through the custom op, as torch.compile makes them")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of the steps")
    ap.add_argument("--gpu", action="store_true", help="real steps on a CUDA GPU, ours and fla's: host vs GPU time")
    ap.add_argument("--shapes", default="B1-T4096-H32,B1-T8192-H16,B2-T8192-H32", help="with --gpu: B<n>-T<n>-H<n>,...")
    args = ap.parse_args(argv)
    if args.gpu:
        return gpu_main(args.shapes)
    if args.op:
        from triton_kda import ops

        ops.forward = ops.chunk_kda_fwd
    torch.set_num_threads(1)
    launches: list[str] = []
    stub_kernels(launches)
    K = V = 128
    gen = torch.Generator().manual_seed(0)
    T, H = args.T, args.H
    d = dict(q=torch.randn(1, T, H, K, generator=gen), k=torch.randn(1, T, H, K, generator=gen),
             v=torch.randn(1, T, H, V, generator=gen), g=torch.randn(1, T, H, K, generator=gen),
             beta=torch.randn(1, T, H, generator=gen), A_log=torch.rand(H, generator=gen),
             dt_bias=torch.randn(H * K, generator=gen))
    for t in d.values():
        t.requires_grad_(True)
    do = torch.randn(1, T, H, V, generator=gen)

    def step():
        o, _ = chunk_kda(**d, **KIMI)
        torch.autograd.grad(o, list(d.values()), do)

    for _ in range(min(20, args.steps)):
        step()
    launches.clear()
    step()
    counts = {n: launches.count(n) for n in sorted(set(launches))}
    us = min(timeit.repeat(step, number=args.steps, repeat=5)) / args.steps * 1e6
    print(f"T{T} H{H}: {us:.0f} us per fwd+bwd step on the host, {sum(counts.values())} Triton launches per step")
    print("kernels:", ", ".join(f"{n} x{c}" for n, c in counts.items()))
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
