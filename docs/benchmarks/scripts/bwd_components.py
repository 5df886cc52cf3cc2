"""Backward component timings and launch-configuration sweeps on one shape; see NOTES.md.

Run on the device from the repo root: python3 docs/benchmarks/scripts/bwd_components.py [--e2e-only]
(--e2e-only: end-to-end fwd, fwd+bwd and peak memory only, e.g. for an older checkout on PYTHONPATH;
 --quick: the backward kernels with their table configurations only, no sweeps)
"""
import os, sys, time
sys.path.insert(0, os.getcwd())
import torch, triton
import triton_kda.wy as tw
import triton_kda.intra as ti
import triton_kda.state as ts
import triton_kda.configs as C
from triton_kda import chunk_kda
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.intra import intra_fwd
from triton_kda.state import state_bwd, state_fwd
from triton_kda.qk import qk_bwd
dev = "cuda"
B, T, H, HV, K, V, BT = 2, 8192, 32, 32, 128, 128, 64
torch.manual_seed(0)
bf = torch.bfloat16
q = torch.randn(B*T, H, K, device=dev, dtype=bf); k = torch.randn_like(q)
v = torch.randn(B*T, HV, V, device=dev, dtype=bf); g = torch.randn(B*T, HV, K, device=dev, dtype=bf)
beta = torch.randn(B*T, HV, device=dev, dtype=bf)
A_log = torch.log(torch.rand(HV, device=dev) * 15 + 1); dt_bias = torch.randn(HV*K, device=dev) * 0.5
plan = plan_chunks(B, T, BT, q.device, None)
kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
bench = lambda f: triton.testing.do_bench(f, warmup=30, rep=150, return_mode="median")
def tryb(name, f):
    try:
        f(); torch.cuda.synchronize(); ms = f"{bench(f):.3f}"
    except Exception as e:
        ms = f"ERR {str(e)[:100]}"
    print(f"{name}: {ms}", flush=True)

# end to end, default configs
qq, kk, vv, gg, bb = (x.view(B, T, *x.shape[1:]) for x in (q, k, v, g, beta))
args = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
            use_beta_sigmoid_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
t = time.time()
with torch.no_grad():
    chunk_kda(qq, kk, vv, gg, bb, **args)
torch.cuda.synchronize(); print(f"first fwd call {time.time()-t:.1f}s", flush=True)
with torch.no_grad():
    tryb("E2E fwd", lambda: chunk_kda(qq, kk, vv, gg, bb, **args))
leaves = [x.clone().requires_grad_(True) for x in (qq, kk, vv, gg, bb)]
do = torch.randn_like(vv)
def fb():
    o, _ = chunk_kda(*leaves, **args)
    torch.autograd.grad(o, leaves, do)
t = time.time(); fb(); torch.cuda.synchronize(); print(f"first fwdbwd call {time.time()-t:.1f}s", flush=True)
tryb("E2E fwd+bwd", fb)
torch.cuda.reset_peak_memory_stats(); fb(); print(f"peak mem fwd+bwd {torch.cuda.max_memory_allocated()/2**30:.2f} GiB", flush=True)

QUICK = "--quick" in sys.argv
if "--e2e-only" in sys.argv:
    sys.exit(0)

# backward components
intra = intra_fwd(q, k, v, g, beta, A_log, dt_bias, 0.088, plan, BT, **kw, store_aux=True)
st = state_fwd(intra, None, plan, BT, V, output_final_state=False, state_v_first=False, store_h=True, store_v_new=True, h_dtype=torch.float32)
dof = do.view(B*T, HV, V).contiguous()
tryb("intra_fwd no aux", lambda: intra_fwd(q, k, v, g, beta, A_log, dt_bias, 0.088, plan, BT, **kw))
tryb("intra_fwd aux", lambda: intra_fwd(q, k, v, g, beta, A_log, dt_bias, 0.088, plan, BT, **kw, store_aux=True))
tryb("state_fwd h+vnew", lambda: state_fwd(intra, None, plan, BT, V, output_final_state=False, state_v_first=False, store_h=True, store_v_new=True, h_dtype=torch.float32))
sb = state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, dof, None, plan, BT, V, want_dh0=False, state_v_first=False, prec="tf32")
tryb("state_bwd", lambda: state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, dof, None, plan, BT, V, want_dh0=False, state_v_first=False, prec="tf32"))
Gc = ti.gate_cumsum(g, A_log, dt_bias, plan, BT, gate=2, lower_bound=-5.0, prec="tf32")
tryb("gate_cumsum", lambda: ti.gate_cumsum(g, A_log, dt_bias, plan, BT, gate=2, lower_bound=-5.0, prec="tf32"))
tryb("wy_recompute", lambda: tw.wy_recompute(q, k, v, g, A_log, dt_bias, intra.Aqk, intra.rstd_q, intra.rstd_k, intra.beta, intra.Akk, 0.088, plan, BT, use_gate_in_kernel=True, lower_bound=-5.0))
fw = lambda: ti.wy_bwd(k, v, Gc, intra.rstd_k, intra.beta, intra.Akk, st.h, st.v_new, sb.dv_new, dof, plan, BT, state_v_first=False, prec="tf32")
for BK, BV, nw, ns in [(64, 64, 4, 1)] + ([] if QUICK else [(32, 64, 4, 1)]):
    ti.wy_bwd_config = lambda arch, K, V, c=C.IntraConfig(BC=16, BK=BK, BV=BV, num_warps=nw, num_stages=ns): c
    tryb(f"wy_bwd BK{BK} BV{BV} w{nw} s{ns}", fw)
ti.wy_bwd_config = C.wy_bwd_config
wy = fw()
for BK, BV, nw, ns in [(64, 64, 4, 2)] + ([] if QUICK else [(64, 64, 4, 1), (64, 32, 4, 1), (64, 128, 4, 1), (128, 64, 8, 1), (32, 64, 4, 2)]):
    ti.intra_bwd_config = lambda arch, K, V, c=C.IntraConfig(BC=16, BK=BK, BV=BV, num_warps=nw, num_stages=ns): c
    tryb(f"intra_bwd BK{BK} BV{BV} w{nw} s{ns}", lambda: ti.intra_bwd(q, k, g, A_log, dt_bias, Gc, intra.gl, intra.rstd_q, intra.rstd_k, intra.beta, st.h, sb.dh, st.v_new, wy, dof, 0.088, plan, BT, gate=2, lower_bound=-5.0, state_v_first=False, prec="tf32"))
ti.intra_bwd_config = C.intra_bwd_config
dG, dGl = torch.randn(B*T, HV, K, device=dev), torch.randn(plan.NT, 4, HV, K, device=dev)
tryb("gate_bwd", lambda: ti.gate_bwd(g, A_log, dt_bias, dG, dGl, plan, BT, gate=2, lower_bound=-5.0))
dpart = torch.randn(B*T, HV, K, device=dev)
tryb("qk_bwd (one of q/k)", lambda: qk_bwd(q, dpart, use_qk_l2norm_in_kernel=True))
