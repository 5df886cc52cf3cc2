"""Host time of bf16 B1 T8192 H16 fwd+bwd steps (Kimi flags), 20 steps under cProfile per mode, the modes alternated
(serial recompute, kept states, twice), without a device sync inside the timed loop; the kept mode's cProfile
sorted by own time. Run from the repository root:

    python3 docs/benchmarks/runs/2026-11-26_kept_states/host_profile.py
"""
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, "docs/benchmarks/scripts")

from bwd_before_after import inputs, step  # noqa: E402

from triton_kda import chunk_kda  # noqa: E402

ENV = "TRITON_KDA_STATE_CKPT_CHUNKS"
d = inputs(1, 8192, 16, torch.bfloat16)
do = torch.randn_like(d["v"])
for mode in ("0", None, "0", None):
    if mode is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = mode
    for _ in range(5):
        step(chunk_kda, d, do)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    for _ in range(20):
        step(chunk_kda, d, do)
        for x in d.values():
            x.grad = None
    pr.disable()
    host = (time.perf_counter() - t) / 20 * 1e3
    torch.cuda.synchronize()
    print(f"mode {mode}: host {host:.3f} ms/step (under cProfile)", flush=True)
    if mode is None:
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
