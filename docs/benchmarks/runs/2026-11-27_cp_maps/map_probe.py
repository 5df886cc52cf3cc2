"""Probe: the CP export map kernels (fwd [M|E], bwd [M^T|F]) at B1 H32 K=V=128 bf16, 131072 tokens, one sequence in
pieces of L chunks (first piece E only / last piece F only), old (num_stages=1, conditional loads) vs new kernels
over launch configurations; maps checked against the old default."""
import sys, itertools, torch, triton
sys.path.insert(0, ".calls")
import state_cp_old as old
import triton_kda.state_cp as new
from triton.testing import do_bench

T, HV, K, V, BT = int(sys.argv[1]) if len(sys.argv) > 1 else 131072, 32, 128, 128, 64
DT = sys.argv[2] if len(sys.argv) > 2 else "bf16"  # fp16: the fp16 path (tf32rn products, fp32 Aqk), table configs
dev = "cuda"
torch.manual_seed(0)
NT = T // BT
bf = torch.bfloat16 if DT == "bf16" else torch.float16
kg = (torch.randn(T, HV, K, device=dev) * 0.05).to(bf)
w = (torch.randn(T, HV, K, device=dev) * 0.05).to(bf)
u = torch.randn(T, HV, V, device=dev).to(bf)
qg = (torch.randn(T, HV, K, device=dev) * 0.1).to(bf)
do = torch.randn(T, HV, V, device=dev).to(bf)
Aqk = (torch.randn(T, HV, BT, device=dev) * 0.1).to(bf if DT == "bf16" else torch.float32)
PREC = "tf32" if DT == "bf16" else "tf32rn"
gl = -torch.rand(NT, HV, K, device=dev) * 0.5


def tables(L):
    P = (NT + L - 1) // L
    cu = torch.tensor([min(i * L * BT, T) for i in range(P)] + [T], device=dev)
    offs = torch.tensor([min(i * L, NT) for i in range(P)] + [NT], device=dev)
    ps = torch.zeros(P, dtype=torch.int32, device=dev)
    sp = torch.tensor([0, P], device=dev)
    mp = torch.arange(P, dtype=torch.int32, device=dev)
    return P, (cu, offs, ps, sp, mp)


def run(mod, which, L, BC, warps, stages):
    P, tab = tables(L)
    nkb = K // BC
    maps = torch.full((P, HV, K, K + V), float("nan"), device=dev)
    if which == "fwd":
        kern, ins = mod._kda_state_cp_fwd_map_kernel, (kg, w, u, gl, gl, maps, maps)
    else:
        kern, ins = mod._kda_state_cp_bwd_map_kernel, (qg, kg, w, Aqk, gl, gl, do, maps, maps)
    grid = (nkb + V // BC, P, HV)
    fn = lambda: kern[grid](*ins, *tab, HV, K, V, BT, K, BC, nkb, False, False, DT == "bf16", PREC, False,
                            num_warps=warps, num_stages=stages)
    fn()
    torch.cuda.synchronize()
    ms = do_bench(fn, warmup=3, rep=30, return_mode="median")
    keep = maps.clone()
    keep[0 if which == "fwd" else P - 1, :, :, :K] = 0  # never written
    return ms, keep


print(torch.cuda.get_device_name(), "T", T, flush=True)
for which in ("fwd", "bwd"):
    for L in (2048, 512, 256, 128):
        if L > NT:
            continue
        ref_ms, ref = run(old, which, L, 64, 8, 1)
        print(f"{which} L{L} old BC64 w8 s1: {ref_ms:.3f} ms", flush=True)
        if DT != "bf16":
            from triton_kda.configs import cp_config
            cc = cp_config(90, K, V, 2)
            grid_cfgs = [(cc.BC, cc.num_warps, cc.fwd_stages if which == "fwd" else cc.bwd_stages)]
        else:
            grid_cfgs = itertools.product((64,), (4, 8), (2, 3, 4))
        for BC, warps, stages in grid_cfgs:
            try:
                ms, m = run(new, which, L, BC, warps, stages)
            except Exception as e:
                print(f"{which} L{L} new BC{BC} w{warps} s{stages}: FAIL {type(e).__name__} {str(e)[:100]}", flush=True)
                continue
            err = ((m - ref).abs().max() / ref.abs().max()).item()
            print(f"{which} L{L} new BC{BC} w{warps} s{stages}: {ms:.3f} ms  x{ref_ms / ms:.2f}  relmax {err:.1e}",
                  flush=True)
