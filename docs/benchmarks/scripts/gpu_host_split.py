"""Host time of one training step on a GPU machine (B1 T512 H16 bf16, Kimi flags: every kernel is short, so the step
is host-bound), split by our host-side stages (each timed around its call, no sync):

    python3 docs/benchmarks/scripts/gpu_host_split.py

Prints microseconds per step: the whole step (forward + backward, enqueue only), validation, the chunk plans
(forward and backward), the forward stages, the state forward (forward and recompute), the WY recompute and the
backward's stages; then the forward alone. The rest of a step is torch's dispatch and autograd of the custom ops.
"""
import collections
import sys
import time

import torch

sys.path.insert(0, "docs/benchmarks/scripts")
import triton_kda.chunk as C  # noqa: E402
import triton_kda.ops as O  # noqa: E402
from bwd_before_after import inputs, step  # noqa: E402

acc = collections.defaultdict(float)


def timed(name, fn):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        acc[name] += time.perf_counter() - t
        return out
    return wrapper


for name in ("chunk_bwd", "_stages", "wy_recompute", "state_fwd", "plan_chunks"):
    setattr(O, name, timed(name, getattr(O, name)))
C.validate_chunk_kda = timed("validate_chunk_kda", C.validate_chunk_kda)

d = inputs(1, 512, 16, torch.bfloat16)
do = torch.randn_like(d["v"])
for _ in range(10):
    step(C.chunk_kda, d, do)
torch.cuda.synchronize()
acc.clear()
N = 100
t = time.perf_counter()
for _ in range(N):
    step(C.chunk_kda, d, do)
total = time.perf_counter() - t
torch.cuda.synchronize()
print(f"step {total / N * 1e6:.0f} us host;", ", ".join(f"{k} {v / N * 1e6:.0f}" for k, v in acc.items()))
t = time.perf_counter()
for _ in range(N):
    C.chunk_kda(**d, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
                use_beta_sigmoid_in_kernel=True)
total = time.perf_counter() - t
torch.cuda.synchronize()
print(f"forward alone {total / N * 1e6:.0f} us host")
