"""fp64 chunked KDA with bf16 storage roundings switched on at chosen places: how much of dA_log's error each
intermediate's bf16 storage explains, on kda-check's B2 T777 H4 K=V=128 softplus-gate row (CPU draws of the seeds).

    PYTHONPATH=. python3 docs/benchmarks/runs/2026-11-27_gate_regimes/dalog_rounding_emulation.py 0,1,2

Roundings (each to bf16 and back): A (Aqk, Akk), w, u, qg, kg, h (the state where products read it), vnew (v_new
where products read it), dh (the state gradient in the decay, kg and v_new gradients; its recurrence stays exact),
dvn (the v_new gradient in the state gradient's recurrence). Values are rounded in the forward with a straight-through
gradient; gradients are rounded in the backward. Prints each group's relative RMSE against the exact fp64 run.
"""
import sys

import torch

from reference.harness import make_inputs
from reference.kda import _pack

F64 = torch.float64
KEYS = ["A", "w", "u", "qg", "kg", "h", "vnew", "dh_decay", "dh_kg", "dh_v", "dvn"]
GROUPS = {"none": [], "w": ["w"], "u": ["u"], "qg": ["qg"], "kg": ["kg"], "vnew": ["vnew"], "h": ["h"],
          "dh": ["dh_decay", "dh_kg", "dh_v"], "dvn": ["dvn"], "all": KEYS,
          "all-but-w,u,qg,kg,vnew": ["A", "h", "dh_decay", "dh_kg", "dh_v", "dvn"]}


def rb(x):
    return x.to(torch.bfloat16).to(F64)


class RoundGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return rb(g)


def rnd(x, on, fwd=True):
    if not on:
        return x
    return x + (rb(x) - x).detach() if fwd else RoundGrad.apply(x)


class Upd(torch.autograd.Function):
    """S' = e * S + kl^T vn, dS' rounded where the flags say: in d(e) = sum_v S dS', d(kl) = vn dS'^T,
    d(vn) = kl dS'; dS = e dS' exact (the state backward keeps it in fp32 on chip)."""

    @staticmethod
    def forward(ctx, S, e, kl, vn, rd, rk, rv):
        ctx.save_for_backward(S, e, kl, vn)
        ctx.f = (rd, rk, rv)
        return e * S + kl.transpose(-1, -2) @ vn

    @staticmethod
    def backward(ctx, dS):
        S, e, kl, vn = ctx.saved_tensors
        rd, rk, rv = ctx.f
        r = rb(dS)
        de = (S * (r if rd else dS)).sum(-1, keepdim=True)
        dkl = vn @ (r if rk else dS).transpose(-1, -2)
        dvn = kl @ (r if rv else dS)
        return e * dS, de, dkl, dvn, None, None, None


def chunk_fwd(d, R, BT=64):
    p = _pack("emulation", d["q"], d["k"], d["v"], d["g"], d["beta"], scale=None, initial_state=d["initial_state"],
              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, lower_bound=d.get("lower_bound"), state_v_first=False, cu_seqlens=None,
              A_log=d["A_log"], dt_bias=d["dt_bias"], multiple=BT)
    N, Lp = p.valid.shape
    NC = Lp // BT

    def ch(x):
        return x.reshape(N, NC, BT, *x.shape[2:]).transpose(2, 3)

    q_c, k_c, v_c, b_c = ch(p.q), ch(p.k), ch(p.v), ch(p.beta)
    Gam = ch(p.g).cumsum(-2)
    i_idx = torch.arange(BT)
    Aq, Lc = [], []
    for j in range(BT):
        causal = (i_idx >= j)[:, None]
        kd = k_c[..., j:j + 1, :] * torch.exp(torch.where(causal, Gam - Gam[..., j:j + 1, :], 0.0)) * causal
        Aq.append((q_c * kd).sum(-1))
        Lc.append((k_c * kd).sum(-1) * (i_idx > j))
    Aqk = torch.stack(Aq, -1)
    L = b_c.unsqueeze(-1) * torch.stack(Lc, -1)
    eye = torch.eye(BT, dtype=F64)
    Akk = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False, unitriangular=True)
    Aqk, Akk = rnd(Aqk, R["A"]), rnd(Akk, R["A"])
    w = rnd(Akk @ (b_c.unsqueeze(-1) * k_c * torch.exp(Gam)), R["w"])
    u = rnd(Akk @ (b_c.unsqueeze(-1) * v_c), R["u"])
    S, outs = p.h0, []
    for c in range(NC):
        Sr = rnd(S, R["h"])
        qg = rnd(q_c[:, c] * torch.exp(Gam[:, c]), R["qg"])
        vn = rnd(u[:, c] - rnd(w[:, c], R["dvn"], fwd=False) @ Sr, R["vnew"])
        outs.append(qg @ Sr + Aqk[:, c] @ vn)
        Gl = Gam[:, c, :, -1:, :]
        kl = rnd(k_c[:, c] * torch.exp(Gl - Gam[:, c]), R["kg"])
        S = Upd.apply(S, torch.exp(Gl).transpose(-1, -2), kl, vn, R["dh_decay"], R["dh_kg"], R["dh_v"])
    o = torch.stack(outs, 1).transpose(2, 3).reshape(N, Lp, outs[0].shape[1], outs[0].shape[-1])[p.valid]
    return o.reshape(d["v"].shape), S


def grads(d, do, dht, R):
    names = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")
    leaves = {n: d[n].detach().double().requires_grad_(True) for n in names}
    o, ht = chunk_fwd({**d, **leaves}, R)
    return dict(zip(leaves, torch.autograd.grad([o, ht], list(leaves.values()), [do.double(), dht.double()]),
                    strict=True))


def err(a, b):
    return ((a - b).norm() / b.norm()).item()


for seed in map(int, sys.argv[1].split(",")):
    d = make_inputs(2, 777, 4, 4, 128, 128, dtype=torch.bfloat16, use_qk_l2norm_in_kernel=True,
                    use_gate_in_kernel=True, initial_state=True, output_final_state=True, seed=seed, device="cpu")
    gen = torch.Generator().manual_seed(1234)
    do = torch.randn(2, 777, 4, 128, generator=gen, dtype=F64).to(torch.bfloat16)
    dht = torch.randn(2, 4, 128, 128, generator=gen, dtype=F64).float()
    ref = grads(d, do, dht, dict.fromkeys(KEYS, False))
    for name, keys in GROUPS.items():
        g = grads(d, do, dht, {k: k in keys for k in KEYS})
        print(f"seed {seed} {name:24s} dA_log {err(g['A_log'], ref['A_log']):.2e} "
              f"dt_bias {err(g['dt_bias'], ref['dt_bias']):.2e} dg {err(g['g'], ref['g']):.2e} "
              f"dq {err(g['q'], ref['q']):.2e}", flush=True)
