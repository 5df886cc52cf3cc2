import cProfile, pstats, sys, time, torch
sys.path.insert(0, "docs/benchmarks/scripts")
from bwd_before_after import inputs, step
from triton_kda import chunk_kda
d = inputs(1, 512, 16, torch.bfloat16)
do = torch.randn_like(d["v"])
for _ in range(10):
    step(chunk_kda, d, do)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(50):
    step(chunk_kda, d, do)
t1 = time.perf_counter()
torch.cuda.synchronize()
t2 = time.perf_counter()
print(f"host {(t1 - t) / 50 * 1e6:.0f} us per step (enqueue), {(t2 - t) / 50 * 1e6:.0f} us with the final sync")
p = cProfile.Profile(); p.enable()
for _ in range(50):
    step(chunk_kda, d, do)
torch.cuda.synchronize()
p.disable()
st = pstats.Stats(p); st.sort_stats("tottime").print_stats(30); st.sort_stats("cumulative").print_stats(45)
