import os, sys, time, json
sys.path.insert(0, os.getcwd())
import torch, torch.nn.functional as F
import triton
from reference.kda import kda_recurrent
from triton_kda import chunk_kda
OUT = os.environ.get("OUT", "/tmp")
dev = "cuda"
def rel(a, b):
    a = a.double(); b = b.double(); return ((a - b).norm() / b.norm()).item()
def inputs(B, T, H, HV, K, V, dtype, kimi=True, seqlens=None, seed=0):
    g_ = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=g_)
    q = r(B, T, H, K); k = r(B, T, H, K); v = r(B, T, HV, V)
    d = dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), beta=r(B, T, HV).to(dtype))
    if kimi:
        d.update(g=r(B, T, HV, K).to(dtype), A_log=torch.log(torch.rand(HV, device=dev) * 15 + 1),
                 dt_bias=r(HV * K) * 0.5, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True,
                 lower_bound=-5.0, use_beta_sigmoid_in_kernel=True)
    else:
        d.update(g=F.logsigmoid(r(B, T, HV, K)).to(dtype), beta=torch.rand(B, T, HV, device=dev, generator=g_).to(dtype),
                 q=F.normalize(q, dim=-1).to(dtype), k=F.normalize(k, dim=-1).to(dtype))
    if seqlens:
        d["cu_seqlens"] = torch.tensor([0] + torch.tensor(seqlens).cumsum(0).tolist(), device=dev)
    return d
rows = []
print("== correctness", flush=True)
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for (B, T, H, HV, K, V, seq, kimi, BT) in [(2, 1000, 2, 4, 128, 128, None, True, 64), (1, 777, 2, 2, 64, 100, [300, 0, 77, 400], False, 32),
                                        (1, 500, 1, 2, 256, 64, None, True, 64)]:
        d = inputs(B, T, H, HV, K, V, dtype, kimi, seq)
        N = len(seq) if seq else B
        d["initial_state"] = torch.randn(N, HV, K, V, device=dev); d["output_final_state"] = True
        o, ht = chunk_kda(**d, chunk_size=BT)
        o2, ht2 = chunk_kda(**d, chunk_size=BT)
        ro, rht = kda_recurrent(**d)
        r = dict(dtype=str(dtype), shape=f"B{B} T{T} H{H} HV{HV} K{K} V{V} BT{BT} seq={seq} kimi={kimi}",
                 o=rel(o, ro), ht=rel(ht, rht), det=bool(torch.equal(o, o2) and torch.equal(ht, ht2)), nan=bool(o.isnan().any()))
        print(r, flush=True); rows.append(r)
# causality: perturb tokens > t
d = inputs(1, 300, 2, 4, 128, 128, torch.bfloat16, True)
o1, _ = chunk_kda(**d)
t = 130
for name in ("q", "k", "v", "g", "beta"):
    d2 = dict(d); x = d[name].clone(); x[:, t + 1:] = torch.randn_like(x[:, t + 1:].float()).to(x.dtype); d2[name] = x
    o2, _ = chunk_kda(**d2)
    print("causal", name, bool(torch.equal(o1[:, :t + 1], o2[:, :t + 1])), flush=True)
print("== timing", flush=True)
try:
    from fla.ops.kda import chunk_kda as fla_kda
except Exception as e:
    fla_kda = None; print("no fla", e)
res = []
for (B, T, H, HV, kimi) in [(2, 8192, 32, 32, True), (2, 8192, 32, 32, False), (8, 2048, 32, 32, True), (1, 8192, 16, 16, True), (2, 8192, 64, 64, True), (2, 8192, 16, 32, True)]:
    d = inputs(B, T, H, HV, 128, 128, torch.bfloat16, kimi)
    f = lambda: chunk_kda(**d)
    t0 = time.time(); f(); torch.cuda.synchronize(); first = time.time() - t0
    with torch.no_grad():
        ms = triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")
    line = dict(shape=f"B{B} T{T} H{H} HV{HV} kimi={kimi}", ours_ms=ms, ours_first_s=first)
    if fla_kda is not None and HV == 32 and H == 32 and B == 2:
        ff = lambda: fla_kda(**d)
        t0 = time.time(); ff(); torch.cuda.synchronize(); line["fla_first_s"] = time.time() - t0
        with torch.no_grad():
            line["fla_ms"] = triton.testing.do_bench(ff, warmup=50, rep=300, return_mode="median")
        fo, _ = ff(); oo, _ = f(); line["ours_vs_fla_rel"] = rel(oo, fo)
    print(line, flush=True); res.append(line)
json.dump(dict(correct=rows, timing=res), open(f"{OUT}/fwd_check.json", "w"), indent=1)
print("SUMMARY"); [print(r) for r in res]
