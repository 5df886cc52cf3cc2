import os, sys, itertools
sys.path.insert(0, os.getcwd())
import torch, triton
import triton_kda.intra as ti
import triton_kda.state as ts
import triton_kda.configs as C
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.intra import intra_fwd
from triton_kda.state import state_fwd
dev = "cuda"
B, T, H, HV, K, V, BT = 2, 8192, 32, 32, 128, 128, 64
torch.manual_seed(0)
q = torch.randn(B*T, H, K, device=dev, dtype=torch.bfloat16); k = torch.randn_like(q)
v = torch.randn(B*T, HV, V, device=dev, dtype=torch.bfloat16); g = torch.randn(B*T, HV, K, device=dev, dtype=torch.bfloat16)
beta = torch.randn(B*T, HV, device=dev, dtype=torch.bfloat16)
A_log = torch.log(torch.rand(HV, device=dev) * 15 + 1); dt_bias = torch.randn(HV*K, device=dev) * 0.5
plan = plan_chunks(B, T, BT, q.device, None)
kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
bench = lambda f: triton.testing.do_bench(f, warmup=30, rep=200, return_mode="median")
res = []
for BC, BK, nw, ns in [(16, 64, 4, 1), (16, 64, 8, 1), (16, 32, 4, 1), (16, 32, 8, 1), (16, 128, 8, 1), (16, 64, 8, 2)]:
    ti.intra_config = lambda arch, K, V, c=C.IntraConfig(BC=BC, BK=BK, BV=64, num_warps=nw, num_stages=ns): c
    try:
        f = lambda: intra_fwd(q, k, v, g, beta, A_log, dt_bias, 0.088, plan, BT, **kw)
        intra = f(); ms = bench(f)
    except Exception as e:
        ms = f"ERR {str(e)[:80]}"
    print(f"intra BC{BC} BK{BK} w{nw} s{ns}: {ms}", flush=True)
ti.intra_config = C.intra_config
intra = intra_fwd(q, k, v, g, beta, A_log, dt_bias, 0.088, plan, BT, **kw)
for BV, nw, ns in [(64, 4, 2), (64, 4, 3), (32, 4, 3)]:
    ts.state_config = lambda arch, K, V, es, c=C.StateConfig(BV=BV, num_warps=nw, num_stages=ns): c
    try:
        f = lambda: state_fwd(intra, None, plan, BT, V, output_final_state=True, state_v_first=False, store_h=False, store_v_new=False, h_dtype=q.dtype)
        f(); ms = bench(f)
    except Exception as e:
        ms = f"ERR {str(e)[:80]}"
    print(f"state BV{BV} w{nw} s{ns}: {ms}", flush=True)
# low-parallelism state: B1 H16
B2, T2, H2 = 1, 8192, 16
q2 = q[:T2, :H2].contiguous(); k2 = k[:T2, :H2].contiguous(); v2 = v[:T2, :H2].contiguous(); g2 = g[:T2, :H2].contiguous(); b2 = beta[:T2, :H2].contiguous()
plan2 = plan_chunks(B2, T2, BT, q.device, None)
ti.intra_config = C.intra_config
intra2 = intra_fwd(q2, k2, v2, g2, b2, A_log[:H2].contiguous(), dt_bias[:H2*K].contiguous(), 0.088, plan2, BT, **kw)
print("intra B1H16:", bench(lambda: intra_fwd(q2, k2, v2, g2, b2, A_log[:H2].contiguous(), dt_bias[:H2*K].contiguous(), 0.088, plan2, BT, **kw)))
for BV, nw, ns in [(64, 4, 2), (32, 4, 2), (16, 4, 2), (16, 2, 2)]:
    ts.state_config = lambda arch, K, V, es, c=C.StateConfig(BV=BV, num_warps=nw, num_stages=ns): c
    f = lambda: state_fwd(intra2, None, plan2, BT, V, output_final_state=True, state_v_first=False, store_h=False, store_v_new=False, h_dtype=q.dtype)
    f(); print(f"state B1H16 BV{BV} w{nw} s{ns}: {bench(f)}", flush=True)
