"""cProfile of 20 bf16 fwd+bwd steps (B1 T4096 H32, Kimi flags, default dispatch) on the GPU machine: where the
host time of a step goes.

    python3 docs/benchmarks/runs/2026-11-27_host_time/host_profile.py
"""
import cProfile
import pstats

import torch

import triton_kda
from benchmarks.roofline import KIMI, step_inputs

d, do = step_inputs(1, 4096, 32, 128, torch.bfloat16)


def step():
    o, _ = triton_kda.chunk_kda(**d, **KIMI)
    torch.autograd.backward(o, do)
    for t in d.values():
        t.grad = None


for _ in range(5):
    step()
torch.cuda.synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(20):
    step()
prof.disable()
torch.cuda.synchronize()
st = pstats.Stats(prof)
st.sort_stats("tottime").print_stats(30)
st.sort_stats("cumtime").print_stats(45)
