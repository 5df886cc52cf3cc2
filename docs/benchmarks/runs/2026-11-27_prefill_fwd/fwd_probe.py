"""Per-kernel CUDA time of the default-dispatch forward (no_grad, Kimi flags, bf16) at one shape: fwd_probe.py B2-T8192-H32 [seqlens]"""
import sys, torch, triton
from reference.harness import make_inputs
import triton_kda
from benchmarks.suites import parse_shape

shape = parse_shape(sys.argv[1])
seqlens = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else None
kw = dict(gate="raw", use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True)
d = make_inputs(shape.B, shape.T, shape.H, shape.HV, shape.K, shape.K, dtype=torch.bfloat16, device="cuda", seqlens=seqlens, **kw)
d["safe_gate"] = True
with torch.no_grad():
    f = lambda: triton_kda.chunk_kda(**d)
    f(); torch.cuda.synchronize()
    print(sys.argv[1:], "backend:", triton_kda.backend_report() if hasattr(triton_kda, "backend_report") else "?")
    ms = triton.testing.do_bench(f, warmup=100, rep=500)
    print(f"do_bench median {ms*1e3:.1f} us")
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(20):
            f()
        torch.cuda.synchronize()
    for e in sorted(p.key_averages(), key=lambda e: -e.device_time_total):
        if e.device_time_total > 0:
            print(f"  {e.device_time_total/20:9.1f} us/call  x{e.count/20:.0f}  {e.key[:90]}")
