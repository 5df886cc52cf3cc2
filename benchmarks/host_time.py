"""Host-side time of one training step (chunk_kda forward + backward under autograd), on any machine (no GPU
needed): the part of a step's wall time that is Python and launch bookkeeping rather than kernels.

    TRITON_INTERPRET=1 python -m benchmarks.host_time [--T 64] [--H 16] [--steps 200] [--op] [--profile]

Kimi Linear's flags (l2norm, gate in kernel, safe_gate, lower_bound -5, beta sigmoid), B = 1, K = V = 128, fp32 CPU
tensors (the host path does not depend on the dtype but for the launch tables; T small so that the orchestration's
few torch ops cost little on the CPU). Every Triton kernel's launch is replaced by a stand-in that records it and
does nothing, so the time is that of validation, planning, allocation, the autograd and custom-op dispatch and the
orchestration's own torch ops, less Triton's launcher (its binder and cache key, about 10-20 us per launch on a GPU
machine) and the device / stream queries. Prints microseconds per step (best of 5 rounds) and the launches per
step; `--profile` adds a cProfile of steps sorted by own time. `--op` sends eager calls through the custom op as
torch.compile does (`triton_kda.ops.forward` replaced by `ops.chunk_kda_fwd`) instead of the autograd.Function that
eager calls take. The stand-ins stay installed: run it in its own process.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import pkgutil
import pstats
import sys
import timeit

import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

import triton_kda
from triton_kda.chunk import chunk_kda

KIMI = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
            use_beta_sigmoid_in_kernel=True)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=64, help="tokens (B = 1)")
    ap.add_argument("--H", type=int, default=16, help="heads (H = HV)")
    ap.add_argument("--steps", type=int, default=200, help="steps per timed round")
    ap.add_argument("--op", action="store_true", help="eager calls through the custom op, as torch.compile makes them")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of the steps")
    args = ap.parse_args(argv)
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
