"""One map-kernel launch per process: python bc_probe.py MOD(old|new) WHICH(fwd|bwd) K BC WARPS STAGES."""
import sys
import torch
sys.path.insert(0, ".calls")
import state_cp_old as old
import triton_kda.state_cp as new
import state_cp_v1 as v1
import state_cp_v2 as v2

mod, which, K, BC, warps, stages = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
mod = dict(old=old, new=new, v1=v1, v2=v2)[mod]
T, HV, V, BT, dev, bf = 16384, 8, K, 64, "cuda", torch.bfloat16
NT = T // BT
torch.manual_seed(0)
kg, w, qg = ((torch.randn(T, HV, K, device=dev) * 0.05).to(bf) for _ in range(3))
u, do = (torch.randn(T, HV, V, device=dev).to(bf) for _ in range(2))
Aqk = (torch.randn(T, HV, BT, device=dev) * 0.1).to(bf)
gl = -torch.rand(NT, HV, K, device=dev) * 0.5
L = 64
P = NT // L
tab = (torch.arange(P + 1, device=dev) * L * BT, torch.arange(P + 1, device=dev) * L,
       torch.zeros(P, dtype=torch.int32, device=dev), torch.tensor([0, P], device=dev),
       torch.arange(P, dtype=torch.int32, device=dev))
maps = torch.zeros(P, HV, K, K + V, device=dev)
nkb = K // BC
if which == "fwd":
    kern, ins = mod._kda_state_cp_fwd_map_kernel, (kg, w, u, gl, gl, maps, maps)
else:
    kern, ins = mod._kda_state_cp_bwd_map_kernel, (qg, kg, w, Aqk, gl, gl, do, maps, maps)
kern[(nkb + V // BC, P, HV)](*ins, *tab, HV, K, V, BT, K, BC, nkb, False, False, True, "tf32", False,
                             num_warps=warps, num_stages=stages)
torch.cuda.synchronize()
torch.save(maps.cpu(), f"/tmp/maps_{'_'.join(sys.argv[1:])}.pt")
print("ok", float(maps.abs().max()))
