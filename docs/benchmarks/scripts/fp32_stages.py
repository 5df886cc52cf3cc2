"""GPU, one call: the forward's intra stage and state stage alone, fp32 vs bf16 inputs, B1 T8192 H16 K = V = 128.

    PYTHONPATH=. python3 docs/benchmarks/scripts/fp32_stages.py
"""
import torch
from triton.testing import do_bench
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.intra import intra_fwd
from triton_kda.state import state_fwd
B, T, H, K, V, BT = 1, 8192, 16, 128, 128, 64
for dt in (torch.float32, torch.bfloat16):
    torch.manual_seed(0)
    q = torch.randn(B * T, H, K, device="cuda", dtype=dt); k = torch.randn_like(q); v = torch.randn(B * T, H, V, device="cuda", dtype=dt)
    g = torch.randn(B * T, H, K, device="cuda", dtype=dt); beta = torch.randn(B * T, H, device="cuda", dtype=dt)
    A_log = torch.zeros(H, device="cuda"); dt_bias = torch.zeros(H * K, device="cuda")
    plan = plan_chunks(B, T, BT, q.device, None)
    f = lambda: intra_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, plan, BT, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
    intra = f(); torch.cuda.synchronize()
    s = lambda: state_fwd(intra, None, plan, BT, V, output_final_state=False, state_v_first=False, store_h=False, store_v_new=False, h_dtype=dt)
    s(); torch.cuda.synchronize()
    print(dt, "intra", round(do_bench(f, warmup=5, rep=50), 3), "state", round(do_bench(s, warmup=5, rep=50), 3), flush=True)
