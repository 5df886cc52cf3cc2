"""How the chunk-local backward's form of the gate gradient decides its accuracy: the E-form `_kda_intra_bwd_kernel`
uses against a spanning form, emulated in torch from the kernel's own inputs, with the intra-chunk products' operands
in fp32 or rounded to TF32.

    TRITON_INTERPRET=1 python docs/benchmarks/scripts/dgate_forms.py

Runs chunk_kda (fp32, through the interpreter) and captures the inputs of `intra_bwd` (dAqk, dL, the gate cumsum,
q, k, the states...). From them it rebuilds the gate gradient of the cumsum (dgate) in several forms, takes it
through the in-kernel gate's derivative and prints dg's and dA_log's relative RMSE against the fp64 recurrence.
For row m of a chunk, with t_ij = (dAqk_ij qn_i + dL_ij kbn_i) kn_j 2^(G_i - G_j) the intra-chunk pair terms:

    exact      the spanning sum  sum_{i >= m > j} t_ij  in fp64
    E          the kernel's form: E_i = sum_j t_ij - sum_j t_ji, summed over i >= m (the pairs with both ends >= m
               cancel); 16-row blocks anchored at their first row, products as the kernel forms them
    E-nodiag   E without the diagonal pairs (they never span a row)
    E+inblock  E for pairs in different 16-row blocks, the spanning sum inside a block
    span       the spanning sum everywhere: block-pair sums, in-block scans and in-block pairs; nothing cancels

Terms from the chunk's initial state (qg, w, kg, the state's decay) span by construction and are the same in every
form. The cases: kda-check's B1 T40 l2norm + gate-in-kernel fp32 row (its own inputs and upstream gradient), and
Kimi Linear's gate (lower bound -5, l2norm, initial state) on inputs rounded to bf16 (T 192, H 2, K = V = 32;
seed 0). The emulation has no exact path for blocks whose gate range overflows the anchored factors (masked gates).
"""
import torch
import torch.nn.functional as F

import reference.kda as RK
import triton_kda.chunk_bwd as CB
from reference.harness import make_inputs, rel_rmse
from triton_kda import chunk_kda
from triton_kda.check import runner
from triton_kda.check.grid import CheckConfig

BC = 16


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 x as a TF32 product reads it (the low 13 mantissa bits dropped)."""
    return (x.float().contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def tf32rn(x: torch.Tensor) -> torch.Tensor:
    """fp32 x rounded to the nearest TF32 value (`_jit._rn_tf32`)."""
    return ((x.float().contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


ROUNDING = {"fp32": lambda x: x.float(), "tf32": tf32, "tf32rn": tf32rn}


def captured_run(kw: dict, names: list, up: torch.Tensor) -> dict:
    """chunk_kda fwd+bwd on kw; returns intra_bwd's inputs (fp64 copies of the fp32 tensors)."""
    cap = {}
    orig = CB.intra_bwd

    def spy(q, k, g, A_log, dt_bias, Gc, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy, do, scale, plan, BT, **kwargs):
        cap.update(q=q, k=k, Gc=Gc, gl=gl, rstd_q=rstd_q, rstd_k=rstd_k, beta=beta_act, h=h, dh=dh, v_new=v_new,
                   dvb=wy.dvb, dAqk=wy.dAqk, dL=wy.dL, do=do, scale=scale, BT=BT)
        return orig(q, k, g, A_log, dt_bias, Gc, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy, do, scale, plan, BT,
                    **kwargs)

    CB.intra_bwd = spy
    try:
        leaves = {**kw, **{n: kw[n].detach().float().requires_grad_() for n in names}}
        o, _ = chunk_kda(**leaves)
        torch.autograd.grad(o, [leaves[n] for n in names], up.float())
    finally:
        CB.intra_bwd = orig
    return {k_: v_.double() if torch.is_tensor(v_) and v_.is_floating_point() else v_ for k_, v_ in cap.items()}


def columns(rnd, G, qn, kn, kbn, dA, dL, rows: slice, Ga, lo: int, drop_diag: bool) -> torch.Tensor:
    """kn_j sum_{i >= lo} (dA_ij qn_i + dL_ij kbn_i) 2^(G_i - G_j) for the block's columns j (anchored at Ga)."""
    n, nr, K = G.shape[0], rows.stop - rows.start, G.shape[1]
    if lo >= n:
        return torch.zeros(nr, K)
    f = torch.exp2(G[lo:] - Ga[None])
    a, l_ = dA[lo:, rows], dL[lo:, rows]
    if drop_diag:
        a = a * (1 - torch.eye(n - lo, nr))
    c = rnd(a.T) @ rnd(qn[lo:] * f) + rnd(l_.T) @ rnd(kbn[lo:] * f)
    return kn[rows] * c * torch.exp2(Ga[None] - G[rows])


def intra_terms(form: str, rnd, G, qn, kn, kbn, dA, dL, n: int) -> torch.Tensor:
    """dgate's intra-chunk part [n, K] of one chunk (fp32 tiles, dA / dL [n, n] lower triangular) in `form`."""
    NC, K = (n + BC - 1) // BC, G.shape[1]
    E = torch.zeros(n, K)                # summed over rows i >= m
    direct = torch.zeros(n, K)           # added to row m as is
    W = torch.zeros(NC, NC, K)           # block-pair sums (span)
    for r in range(NC):
        rows = slice(r * BC, min(n, (r + 1) * BC))
        nr = rows.stop - rows.start
        Ga = G[r * BC]
        eA = torch.exp2(G[rows] - Ga)
        row_parts = []                   # the block's row sums, one per column block s <= r
        for s in range(r + 1):
            cols = slice(s * BC, min(n, (s + 1) * BC))
            kc = kn[cols] * torch.exp2(Ga[None] - G[cols])
            dAs, dLs = dA[rows, cols], dL[rows, cols]
            if s == r and form == "E-nodiag":
                dAs = dAs.tril(-1)
            row_parts.append(qn[rows] * (rnd(dAs) @ rnd(kc)) * eA + kbn[rows] * (rnd(dLs) @ rnd(kc)) * eA)

        if form in ("E", "E-nodiag"):
            E[rows] += sum(row_parts) - columns(rnd, G, qn, kn, kbn, dA, dL, rows, Ga, r * BC, form == "E-nodiag")
            continue
        # pairs inside the block: the spanning sum, each pair once
        t = ((dA[rows, rows][:, :, None] * qn[rows][:, None] + dL[rows, rows][:, :, None] * kbn[rows][:, None])
             * kn[rows][None] * torch.exp2(torch.clamp(G[rows][:, None] - G[rows][None], max=0.0)))
        m = torch.arange(nr)
        spans = ((m[:, None, None] <= m[None, :, None]) & (m[None, None, :] < m[:, None, None])).float()
        direct[rows] += torch.einsum("mij,ijk->mk", spans, t)
        earlier = sum(row_parts[:r]) if r else torch.zeros(nr, K)   # columns in earlier blocks
        later = columns(rnd, G, qn, kn, kbn, dA, dL, rows, Ga, (r + 1) * BC, False)  # rows in later blocks
        if form == "E+inblock":
            E[rows] += earlier - later
            continue
        direct[rows] += (earlier.flip(0).cumsum(0).flip(0)
                         + torch.cat([torch.zeros_like(later[:1]), later[:-1].cumsum(0)]))
        for s in range(r):
            W[r, s] = row_parts[s].sum(0)
    out = E.flip(0).cumsum(0).flip(0) + direct
    for p in range(NC):          # span: pairs from a block before p to a block after it
        out[p * BC:(p + 1) * BC] += W[p + 1:, :p].sum((0, 1))
    return out


def dgate_of(c: dict, form: str, rnd) -> torch.Tensor:
    """dgate [TT, HV, K] (fp64) from the captured inputs c, intra-chunk part in `form`."""
    TT, HV, K = c["Gc"].shape
    H, BT = c["q"].shape[1], c["BT"]
    out = torch.zeros(TT, HV, K, dtype=torch.float64)
    for hv in range(HV):
        h_ = hv // (HV // H)
        for ci in range((TT + BT - 1) // BT):
            t0, n = ci * BT, min(BT, TT - ci * BT)
            rs = slice(t0, t0 + n)
            G, Gl = c["Gc"][rs, hv].float(), c["gl"][ci, hv].float()
            qn = (c["q"][rs, h_] * c["rstd_q"][rs, hv, None] * c["scale"]).float()
            kn = (c["k"][rs, h_] * c["rstd_k"][rs, hv, None]).float()
            kbn = kn * c["beta"][rs, hv, None].float()
            S, dS = c["h"][ci, hv].double(), c["dh"][ci, hv].double()
            do, vn, dvb = c["do"][rs, hv], c["v_new"][rs, hv], c["dvb"][rs, hv]
            eG = torch.exp2(G.double())
            state = qn.double() * (do @ S.T) * eG - kbn.double() * (dvb @ S.T) * eG
            state[n - 1] += (S * dS).sum(1) * torch.exp2(Gl.double())
            kg = (vn @ dS.T) * torch.exp2(Gl.double()[None] - G.double()) * kn.double()
            dgate = state.flip(0).cumsum(0).flip(0) + torch.cat([torch.zeros_like(kg[:1]), kg[:-1].cumsum(0)])
            dA = c["dAqk"][rs, hv, :n].tril()
            dL = c["dL"][rs, hv, :n].tril(-1)
            if form == "exact":
                t = ((dA[:, :, None] * qn.double()[:, None] + dL[:, :, None] * kbn.double()[:, None])
                     * kn.double()[None] * torch.exp2(G.double()[:, None] - G.double()[None]))
                m = torch.arange(n)
                spans = (m[:, None, None] <= m[None, :, None]) & (m[None, None, :] < m[:, None, None])
                dgate += torch.einsum("mij,ijk->mk", spans.double(), t)
            else:
                dgate += intra_terms(form, rnd, G, qn, kn, kbn, dA.float(), dL.float(), n).double()
            out[rs, hv] = dgate
    return out


def case(name: str, kw: dict, up=None):
    names = [n for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")
             if torch.is_tensor(kw.get(n))]
    rk = {**kw, **{n: kw[n].double().requires_grad_() for n in names}}
    o_ref, _ = RK.kda_recurrent(**rk)
    if up is None:
        up = torch.randn(o_ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    elif callable(up):
        up = up(o_ref)
    ref = dict(zip(names, torch.autograd.grad(o_ref, [rk[n] for n in names], up), strict=True))
    c = captured_run(kw, names, up)
    TT, HV, K = c["Gc"].shape
    x = kw["g"].double().reshape(TT, HV, K) + kw["dt_bias"].double().view(HV, K)
    a = kw["A_log"].double().exp().view(1, HV, 1)
    lb = kw.get("lower_bound")
    if lb is None:   # gate = -a softplus(x)
        dx, da = -a * torch.sigmoid(x), -a * F.softplus(x)
    else:            # gate = lb sigmoid(a x)
        s = torch.sigmoid(a * x)
        dx, da = lb * s * (1 - s) * a, lb * s * (1 - s) * a * x
    print(f"== {name}")
    for form in ("exact", "E", "E-nodiag", "E+inblock", "span"):
        for rn in ("fp32",) if form == "exact" else ("fp32", "tf32", "tf32rn"):
            dgate = dgate_of(c, form, ROUNDING[rn])
            print(f"  {form:9s} {rn:6s}  dg {rel_rmse(dgate * dx, ref['g'].reshape(TT, HV, K)):.2e}"
                  f"  dA_log {rel_rmse((dgate * da).sum((0, 2)), ref['A_log']):.2e}")


def main():
    torch.set_default_dtype(torch.float32)
    cfg = CheckConfig(1, 40, 1, 1, 16, 16, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)
    case("kda-check B1-T40-H1-HV1-K16-V16-fp32-l2norm-gate_in_kernel", runner._call_kwargs(cfg, torch.device("cpu")),
         lambda o: runner.upstream_grads(cfg, {"o": o}, torch.device("cpu"))[0])
    kw = make_inputs(1, 192, 2, 2, 32, 32, dtype=torch.float32, device="cpu", gate="raw", use_gate_in_kernel=True,
                     lower_bound=-5.0, use_qk_l2norm_in_kernel=True, initial_state=True, seed=0)
    for n in ("q", "k", "v", "g"):
        kw[n] = kw[n].to(torch.bfloat16).float()
    case("Kimi gate (lower bound -5), bf16-rounded inputs, T192 H2 K32", {**kw, "lower_bound": -5.0})


if __name__ == "__main__":
    main()
