"""One bf16 Kimi-flag call of chunk_kda under no_grad and one training step, B1 T2048 H4 HV8 K=V=128 varlen: prints
where triton_kda was imported from, which backend served each op (`backend_report()`), and saves the outputs and
gradients to argv[1] (`torch.save`). Run once from a wheel without nvcc and once from the source tree with the nvcc
build cache, then `python wheel_check.py --compare A B` says whether they are bit-identical."""
import sys

import torch

if sys.argv[1] == "--compare":
    a, b = (torch.load(p) for p in sys.argv[2:4])
    diff = [n for n in a if not torch.equal(a[n], b[n])]
    print(f"{len(a)} tensors compared: " + ("bit-identical" if not diff else f"differ: {diff}"))
    sys.exit(1 if diff else 0)

import triton_kda  # noqa: E402
from triton_kda import backend_report, chunk_kda  # noqa: E402

print("triton_kda from", triton_kda.__file__)
dev = "cuda"
gen = torch.Generator(device=dev).manual_seed(0)
B, T, H, HV, K = 1, 2048, 4, 8, 128
cu = torch.tensor([0, 700, 2048], device=dev)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=gen, device=dev).to(dtype)


q, k = rand(B, T, H, K), rand(B, T, H, K)
v, g = rand(B, T, HV, K), rand(B, T, HV, K)
beta = rand(B, T, HV)
kimi = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=rand(HV, dtype=torch.float32),
            dt_bias=rand(HV * K, dtype=torch.float32), use_beta_sigmoid_in_kernel=True, safe_gate=True,
            lower_bound=-5.0, cu_seqlens=cu, cu_seqlens_cpu=cu.cpu(), output_final_state=True)
out = {}
with torch.no_grad():
    out["o_infer"], out["ht_infer"] = chunk_kda(q, k, v, g, beta, **kimi)
leaves = {n: t.clone().requires_grad_(True) for n, t in dict(q=q, k=k, v=v, g=g, beta=beta).items()}
o, ht = chunk_kda(**leaves, **kimi)
do, dht = rand(*o.shape), rand(*ht.shape, dtype=torch.float32)
torch.autograd.backward((o, ht), (do, dht))
out |= {"o": o.detach(), "ht": ht.detach()} | {f"d{n}": t.grad for n, t in leaves.items()}
torch.cuda.synchronize()
for e in backend_report():
    print(f"{e.op}: {e.name} ({e.reason})")
torch.save(out, sys.argv[1])
print("saved", len(out), "tensors")
