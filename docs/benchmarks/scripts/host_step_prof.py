"""Host time of a training step on a GPU machine: B1 H16 bf16, Kimi flags, T = 512 (every kernel short: the step
is host-bound) and T = 8192 (the standard suite's smallest shape).

    python3 docs/benchmarks/scripts/host_step_prof.py

Per T, three rounds of 50 fwd+bwd steps (`bwd_before_after.step`; the leaves' gradients accumulate, as in that
script): microseconds per step to enqueue them, then including the final sync; then one no_grad forward per T (its
first call at T = 8192 compiles the inference path's kernels, so that figure includes compilation). Last, a cProfile
of 50 steps at T = 8192, sorted by own time and by cumulative time.
"""
import cProfile
import pstats
import sys
import time

import torch

sys.path.insert(0, "docs/benchmarks/scripts")
from bwd_before_after import inputs, step  # noqa: E402

from triton_kda import chunk_kda  # noqa: E402

FLAGS = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
             use_beta_sigmoid_in_kernel=True)

for T in (512, 8192):
    d = inputs(1, T, 16, torch.bfloat16)
    do = torch.randn_like(d["v"])
    for _ in range(10):
        step(chunk_kda, d, do)
    torch.cuda.synchronize()
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(50):
            step(chunk_kda, d, do)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"T{T}: host {(t1 - t) / 50 * 1e6:.0f} us per step (enqueue), {(t2 - t) / 50 * 1e6:.0f} us with the "
              "final sync", flush=True)
    with torch.no_grad():
        t = time.perf_counter()
        for _ in range(50):
            chunk_kda(**{k: v.detach() for k, v in d.items()}, **FLAGS)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"T{T}: fwd no_grad host {(t1 - t) / 50 * 1e6:.0f} us", flush=True)
prof = cProfile.Profile()
prof.enable()
for _ in range(50):
    step(chunk_kda, d, do)
torch.cuda.synchronize()
prof.disable()
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(40)
stats.sort_stats("cumulative").print_stats(60)
