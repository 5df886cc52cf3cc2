"""Host time per bf16 fwd+bwd step with the kept launchers (triton_kda.launch) and without them, in one process,
alternating 12 rounds of 20 enqueued steps per mode (without: every launch through Triton, as before); min and
median per mode. The machine's host time drifts between processes (docs/benchmarks/runs/2026-11-27_host_time), so
only an in-process alternation compares the two.

    python3 docs/benchmarks/runs/2026-11-27_host_time/launch_ab.py
"""
import statistics
import time

import torch

import triton_kda
from benchmarks.roofline import KIMI, step_inputs
from triton_kda import launch

real = launch.is_interpreter
for text, (B, T, H) in (("B1-T4096-H32", (1, 4096, 32)), ("B1-T8192-H16", (1, 8192, 16))):
    d, do = step_inputs(B, T, H, 128, torch.bfloat16)

    def step(d=d, do=do):
        o, _ = triton_kda.chunk_kda(**d, **KIMI)
        torch.autograd.backward(o, do)
        for t in d.values():
            t.grad = None

    res = {"triton": [], "kept": []}
    for _ in range(12):
        for mode in res:
            launch.is_interpreter = (lambda: True) if mode == "triton" else real  # True: the plain Triton launch
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                step()
            res[mode].append((time.perf_counter() - t0) / 20 * 1e3)
            torch.cuda.synchronize()
    launch.is_interpreter = real
    print(text, " ".join(f"{m}: min {min(v):.3f} median {statistics.median(v):.3f} ms" for m, v in res.items()),
          flush=True)
