"""Host-side time of one training step (chunk_kda forward + backward under autograd) of ours, on any machine (no GPU
needed): the part of a step's wall time that is Python and launch bookkeeping rather than kernels.

    TRITON_INTERPRET=1 python3 docs/benchmarks/scripts/train_host_overhead.py [--T 64] [--H 16] [--steps 200] [--op]

Kimi flags (l2norm + gate in kernel + safe_gate, lower_bound -5 + beta sigmoid), B = 1, K = V = 128, fp32 CPU
tensors (the host path does not depend on the dtype but for the launch tables; T small so that the few torch ops of
the orchestration cost little on the CPU). Every Triton kernel's launch is replaced by a stand-in that records it
and does nothing, so the time is that of validation, planning, allocation, the autograd and custom-op dispatch and
the orchestration's own torch ops, less Triton's launcher (its binder and cache key, about 10-20 us per launch on a
GPU machine: `decode_host_overhead.py` times them) and the device / stream queries. Prints microseconds per step
(best of 5 rounds), the launches per step, then a cProfile of steps sorted by own time. `--op` sends eager calls
through the custom op as torch.compile does (`triton_kda.ops.forward` replaced by `ops.chunk_kda_fwd`) instead of
the autograd.Function that eager calls take since 2d11551.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import pkgutil
import pstats
import sys
import timeit

import torch
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

sys.path.insert(0, os.getcwd())

import triton_kda  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402

launches: list[str] = []


class _StandIn:
    """A JIT kernel whose launch records its name and does nothing."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            launches.append(self.name)
        return launch


def stub_kernels() -> None:
    for info in pkgutil.iter_modules(triton_kda.__path__):
        mod = importlib.import_module(f"triton_kda.{info.name}")
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, (JITFunction, InterpretedFunction)) and name.endswith("_kernel"):
                setattr(mod, name, _StandIn(name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--op", action="store_true")
    args = ap.parse_args()
    if args.op:
        from triton_kda import ops

        ops.forward = ops.chunk_kda_fwd
    torch.set_num_threads(1)
    stub_kernels()
    K = V = 128
    gen = torch.Generator().manual_seed(0)
    d = dict(q=torch.randn(1, args.T, args.H, K, generator=gen), k=torch.randn(1, args.T, args.H, K, generator=gen),
             v=torch.randn(1, args.T, args.H, V, generator=gen), g=torch.randn(1, args.T, args.H, K, generator=gen),
             beta=torch.randn(1, args.T, args.H, generator=gen), A_log=torch.rand(args.H, generator=gen),
             dt_bias=torch.randn(args.H * K, generator=gen))
    for t in d.values():
        t.requires_grad_(True)
    do = torch.randn(1, args.T, args.H, V, generator=gen)

    def step():
        o, _ = chunk_kda(**d, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True,
                         lower_bound=-5.0, use_beta_sigmoid_in_kernel=True)
        torch.autograd.grad(o, list(d.values()), do)

    for _ in range(20):
        step()
    launches.clear()
    step()
    counts = {n: launches.count(n) for n in sorted(set(launches))}
    us = min(timeit.repeat(step, number=args.steps, repeat=5)) / args.steps * 1e6
    print(f"T{args.T} H{args.H}: {us:.0f} us per fwd+bwd step on the host, {sum(counts.values())} Triton launches "
          "per step")
    print("kernels:", ", ".join(f"{n} x{c}" for n, c in counts.items()))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
