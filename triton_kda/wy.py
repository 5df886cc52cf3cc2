"""WY stage: w = Akk (beta k 2^G), u = Akk (beta v) recomputed from the saved Akk (forward kernel, run by the backward's
recompute), and the WY backward (gradients through u and w into v, beta, Akk and the intra-chunk products)."""
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from triton_kda._jit import _chunk_rows, _dot, _dot_split, _op, _pow2_scale, _split_operand, _state_offsets, _store_pair
from triton_kda.configs import arch_of, fp32_pairs, precision_of, wy_bwd_config, wy_fwd_config
from triton_kda.gate import _gate_cumsum, gate_mode
from triton_kda.launch import launch_kernel


@triton.jit
def _kda_wy_fwd_kernel(
    q, k, v, g, A_log, dt_bias, rstd_q, rstd_k, beta_act, Akk,
    w, u, qg, kg, gl, rs,
    cu_seqlens, chunk_indices, scale, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr, PAIRS: tl.constexpr, UNIT_ROWS: tl.constexpr,
):
    """The backward's recompute of the intra forward's products from its saved Akk: one program per (chunk, v-head).
        w = Akk (beta kn 2^G),  u = Akk (beta v),  qg = scale qn 2^G,  kg = kn 2^(G_last - G)
    q, k [TT, H, K]; v [TT, HV, V]; g [TT, HV, K] (raw); rstd_q, rstd_k, beta_act [TT, HV] fp32 and Akk [TT, HV, BT]
    as `_kda_intra_fwd_kernel` stored them. Writes w, qg, kg [TT, HV, K] and u [TT, HV, V] in the input dtype and
    gl [NT, HV, K] fp32, bit for bit as the forward did: G is recomputed with the forward's K slices (a cumsum's
    rounding follows its tile), and the products' operands are rounded to the input dtype as the forward's parked
    ones were. With PAIRS (fp32 inputs) w, qg and kg are written as fp16 pairs (`_jit._store_pair`) of their rows
    times 2^s, and rs [TT, HV] fp32 gets 2^-s: s puts a bound of the row's magnitude (|q| rq scale, |k| rk and
    |Akk| (beta |k| rk) row by row; 2^G <= 1 as g <= 0) in [2^14, 2^15), so the state passes read them without
    splitting them again. UNIT_ROWS (in-kernel l2norm: |q| rq, |k| rk <= 1) takes 1 for those maxima instead of a
    pass over q and k."""
    i_t, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos, T, t0, n_valid, o_t, m_t = _chunk_rows(cu_seqlens, chunk_indices, i_t, BT)
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv
    b_rq = tl.load(rstd_q + p_row_hv, mask=m_t, other=0.0)
    b_rk = tl.load(rstd_k + p_row_hv, mask=m_t, other=0.0)
    b_beta = tl.load(beta_act + p_row_hv, mask=m_t, other=0.0)
    p_A = tl.make_block_ptr(Akk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    b_Xhi, b_Xlo = _split_operand(_op(tl.load(p_A, boundary_check=(0, 1)), IS_BF16), PREC)
    if PAIRS:
        if UNIT_ROWS:
            b_qm = tl.full([BT], 1.0, dtype=tl.float32)
            b_km = tl.full([BT], 1.0, dtype=tl.float32)
        else:
            b_qm = tl.zeros([BT], dtype=tl.float32)
            b_km = tl.zeros([BT], dtype=tl.float32)
            for i_k in range(tl.cdiv(K, BK)):
                p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                b_qm = tl.maximum(b_qm, tl.max(tl.abs(tl.load(p_q, boundary_check=(0, 1))), 1) * b_rq)
                b_km = tl.maximum(b_km, tl.max(tl.abs(tl.load(p_k, boundary_check=(0, 1))), 1) * b_rk)
        b_wm = tl.sum(tl.abs(b_Xhi) * (b_beta * b_km)[None, :], 1)
        b_up, b_down = _pow2_scale(tl.maximum(tl.maximum(b_qm * scale, b_km), b_wm))
        tl.store(rs + p_row_hv, b_down, mask=m_t)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                           HAS_A_LOG, HAS_DT_BIAS, PREC == "tf32x3").to(tl.float32)
        b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
        tl.store(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, b_Gl, mask=o_k < K)
        b_eG = tl.exp2(b_G)
        b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32) * b_rk[:, None]
        b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32) * (b_rq * scale)[:, None]
        p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_wop = (b_k * b_beta[:, None] * b_eG).to(p_w.dtype.element_ty)
        b_w = _dot_split(b_Xhi, b_Xlo, _op(b_wop, IS_BF16), None, PREC)
        b_kg = tl.where(m_t[:, None], b_k * tl.exp2(b_Gl[None, :] - b_G), 0.0)
        if PAIRS:
            _store_pair(w, b_w * b_up[:, None], bos, i_hv, T, t0, i_k * BK, HV, K, BT, BK)
            _store_pair(qg, b_q * b_eG * b_up[:, None], bos, i_hv, T, t0, i_k * BK, HV, K, BT, BK)
            _store_pair(kg, b_kg * b_up[:, None], bos, i_hv, T, t0, i_k * BK, HV, K, BT, BK)
        else:
            tl.store(p_w, b_w.to(p_w.dtype.element_ty), boundary_check=(0, 1))
            tl.store(p_qg, (b_q * b_eG).to(p_qg.dtype.element_ty), boundary_check=(0, 1))
            tl.store(p_kg, b_kg.to(p_kg.dtype.element_ty), boundary_check=(0, 1))
    for i_v in range(tl.cdiv(V, BV)):
        p_v = tl.make_block_ptr(v + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        b_uop = (tl.load(p_v, boundary_check=(0, 1)).to(tl.float32) * b_beta[:, None]).to(p_u.dtype.element_ty)
        tl.store(p_u, _dot_split(b_Xhi, b_Xlo, _op(b_uop, IS_BF16), None, PREC).to(p_u.dtype.element_ty),
                 boundary_check=(0, 1))


class IntraOut(NamedTuple):
    """The intra stage's outputs, as `intra.intra_fwd` writes them and `wy_recompute` rebuilds them. Where rs is not
    empty, w, qg and kg are fp16 pairs: their fp32 storage holds, per token and head, K fp16 values hi then K fp16
    values lo, and row t of the tensor is (hi + lo) rs[t] (`pairs`, `_jit._store_pair`)."""
    Aqk: torch.Tensor               # [TT, HV, BT], scale included (bf16 for bf16 inputs, else fp32)
    w: torch.Tensor                 # [TT, HV, K]
    u: torch.Tensor                 # [TT, HV, V]
    qg: torch.Tensor                # [TT, HV, K]
    kg: torch.Tensor                # [TT, HV, K]
    gl: torch.Tensor                # [NT, HV, K] fp32: gate cumsum (log2 units) at each chunk's last token
    rstd_q: torch.Tensor | None     # [TT, HV] fp32 (ones without in-kernel l2norm) (aux)
    rstd_k: torch.Tensor | None     # [TT, HV] fp32 (aux)
    beta: torch.Tensor | None       # [TT, HV] fp32, activated (aux)
    Akk: torch.Tensor | None        # [TT, HV, BT] in Aqk's dtype, (I + L)^-1 (aux)
    rs: torch.Tensor                # [TT, HV] fp32 row factors where w, qg, kg hold fp16 pairs (`wy_recompute` on
                                    # fp32 inputs; `pairs`), else empty


def wy_recompute(q, k, v, g, A_log, dt_bias, Aqk, rstd_q, rstd_k, beta_act, Akk, scale: float, plan,
                 BT: int, *, use_gate_in_kernel: bool, lower_bound: float | None,
                 use_qk_l2norm_in_kernel: bool) -> IntraOut:
    """The backward's recompute of `intra_fwd`'s outputs from what the forward saved (Aqk, rstd_q, rstd_k, beta_act,
    Akk: the aux outputs), bit for bit: launches `_kda_wy_fwd_kernel` on (NT, HV). q, k: [TT, H, K]; v: [TT, HV, V];
    g: [TT, HV, K] (contiguous, flattened); A_log [HV] and dt_bias [HV * K] or None. fp32 inputs get w, qg, kg as
    fp16 pairs with row factors rs (the kernel's PAIRS; `configs.fp32_pairs`), which only the state passes and their
    CP maps read."""
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    dev, dt = q.device, q.dtype
    cfg = wy_fwd_config(arch_of(dev), K, V)
    w, qg, kg = (torch.empty(TT, HV, K, device=dev, dtype=dt) for _ in range(3))
    u = torch.empty(TT, HV, V, device=dev, dtype=dt)
    gl = torch.empty(plan.NT, HV, K, device=dev, dtype=torch.float32)
    pair = dt == torch.float32 and fp32_pairs(arch_of(dev), K)
    rs = torch.empty(TT if pair else 0, HV, device=dev, dtype=torch.float32)
    gate = gate_mode(use_gate_in_kernel, lower_bound)
    launch_kernel(_kda_wy_fwd_kernel, (plan.NT, HV),
        q, k, v, g, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q, rstd_q, rstd_k,
        beta_act, Akk, w, u, qg, kg, gl, rs if pair else gl, plan.cu_seqlens, plan.chunk_indices, scale,
        lower_bound if lower_bound is not None else 0.0,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=cfg.BK, BV=cfg.BV, GATE=gate, HAS_A_LOG=gate > 0 and A_log is not None,
        HAS_DT_BIAS=gate > 0 and dt_bias is not None, IS_BF16=dt == torch.bfloat16, PREC=precision_of(dt),
        PAIRS=pair, UNIT_ROWS=use_qk_l2norm_in_kernel, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return IntraOut(Aqk=Aqk, w=w, u=u, qg=qg, kg=kg, gl=gl, rstd_q=rstd_q, rstd_k=rstd_k, beta=beta_act, Akk=Akk,
                    rs=rs)


def pairs(intra: IntraOut) -> bool:
    """Whether intra's w, qg and kg are fp16 pairs (see `IntraOut`)."""
    return intra.rs.numel() > 0


@triton.jit
def _kda_wy_bwd_kernel(
    k, v, Gc, rstd_k, beta_act, Akk, h, v_new, dv_new, do,
    dv, dvb, dAqk, dL, dbeta_v,
    cu_seqlens, chunk_indices,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr,
    VIA_STATE: tl.constexpr, PREC: tl.constexpr,
):
    """Backward through u = Akk (beta v), w = Akk kb and Akk = (I + L)^-1 (kb = beta kn 2^G), and the Aqk gradient;
    one program per (chunk, v-head), V in slices of BV.

    k [TT, H, K]; v, do [TT, HV, V]; Gc [TT, HV, K] fp32 (the gate cumsum, `gate_cumsum`, hi of its pair for fp32
    inputs); rstd_k, beta_act [TT, HV] fp32; Akk [TT, HV, BT] (as the forward stored it); h [NT, HV, K, V] fp32
    ([NT, HV, V, K] if V_FIRST; read with VIA_STATE only); v_new [TT, HV, V]; dv_new [TT, HV, V] fp32 from the reverse
    state pass. With S = h[c], the gradient of Akk is dA = dv_new (beta v - kb S)^T (dw = -dv_new S^T is never
    materialised) and dL = -Akk^T dA Akk^T. As v_new = u - w S = Akk (beta v - kb S), dA = dv_new v_new^T (I + L)^T and
    dL = -dvb v_new^T: that form needs neither S nor kb (k, Gc, rstd_k and h are then not read). VIA_STATE (fp32
    inputs) forms dA from S instead, in K slices of BK: it does not carry v_new's rounding (through v_new, the fp32
    test cases' dg and dA_log errors vs fp64 were up to 1.6x and 2.9x larger).
        dAqk = tril(do v_new^T),  dvb = Akk^T dv_new,  dL = -tril_strict(dvb v_new^T),  dv = beta dvb,
        dbeta_v = rowsum(dvb v)
    Writes dv [TT, HV, V] in v's dtype, dvb [TT, HV, V] fp32, dAqk / dL [TT, HV, BT] fp32, dbeta_v [TT, HV] fp32.
    """
    i_t, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos, T, t0, n_valid, o_t, m_t = _chunk_rows(cu_seqlens, chunk_indices, i_t, BT)
    m_tt = m_t[:, None] & m_t[None, :]
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv

    p_A = tl.make_block_ptr(Akk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    b_At = tl.trans(tl.load(p_A, boundary_check=(0, 1)).to(tl.float32))
    b_b = tl.load(beta_act + p_row_hv, mask=m_t, other=0.0)
    b_dAqk = tl.zeros((BT, BT), dtype=tl.float32)
    b_dL = tl.zeros((BT, BT), dtype=tl.float32)  # dA with VIA_STATE
    b_db = tl.zeros((BT,), dtype=tl.float32)
    if VIA_STATE:
        p_state = (i_t * HV + i_hv).to(tl.int64) * K * V
        b_rkb = tl.load(rstd_k + p_row_hv, mask=m_t, other=0.0) * b_b
    for i_v in range(tl.cdiv(V, BV)):
        p_do = tl.make_block_ptr(do + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_dvn = tl.make_block_ptr(dv_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                  (1, 0))
        p_v = tl.make_block_ptr(v + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        b_vnT = tl.trans(tl.load(p_vn, boundary_check=(0, 1)).to(tl.float32))
        b_dvn = tl.load(p_dvn, boundary_check=(0, 1))
        b_v = tl.load(p_v, boundary_check=(0, 1)).to(tl.float32)
        b_dAqk += _dot(tl.load(p_do, boundary_check=(0, 1)).to(tl.float32), b_vnT, None, PREC)
        b_dvb = _dot(b_At, b_dvn, None, PREC)
        if VIA_STATE:
            o_v = i_v * BV + tl.arange(0, BV)
            b_P = tl.zeros((BT, BV), dtype=tl.float32)
            for i_k in range(tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                off_h = _state_offsets(o_k, o_v, K, V, V_FIRST)
                p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                p_G = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                b_kb = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32) * b_rkb[:, None]
                b_kb *= tl.exp2(tl.load(p_G, boundary_check=(0, 1)))
                b_S = tl.load(h + p_state + off_h, mask=(o_k < K)[:, None] & (o_v < V)[None, :], other=0.0)
                b_S = b_S.to(tl.float32)
                b_P += _dot(b_kb, b_S, None, PREC)
            b_dL += _dot(b_dvn, tl.trans(b_v * b_b[:, None] - b_P), None, PREC)
        else:
            b_dL -= _dot(b_dvb, b_vnT, None, PREC)
        p_dv = tl.make_block_ptr(dv + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_dvb = tl.make_block_ptr(dvb + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        tl.store(p_dv, (b_dvb * b_b[:, None]).to(p_dv.dtype.element_ty), boundary_check=(0, 1))
        tl.store(p_dvb, b_dvb, boundary_check=(0, 1))
        b_db += tl.sum(b_dvb * b_v, axis=1)
    if VIA_STATE:
        b_dL = -_dot(_dot(b_At, b_dL, None, PREC), b_At, None, PREC)
    p_dAqk = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    p_dL = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    tl.store(p_dAqk, tl.where(m_tt & (o_t[None, :] <= o_t[:, None]), b_dAqk, 0.0), boundary_check=(0, 1))
    tl.store(p_dL, tl.where(m_tt & (o_t[None, :] < o_t[:, None]), b_dL, 0.0), boundary_check=(0, 1))
    tl.store(dbeta_v + p_row_hv, b_db, mask=m_t)


class WYBwdOut(NamedTuple):
    dv: torch.Tensor        # [TT, HV, V] in v's dtype
    dvb: torch.Tensor       # [TT, HV, V] fp32, Akk^T dv_new
    dAqk: torch.Tensor      # [TT, HV, BT] fp32
    dL: torch.Tensor        # [TT, HV, BT] fp32
    dbeta: torch.Tensor     # [TT, HV] fp32, the beta gradient through u (before the sigmoid)


def wy_bwd(k, v, Gc: Callable[[], torch.Tensor], rstd_k, beta_act, Akk, h, v_new, dv_new, do, plan, BT: int, *,
           state_v_first: bool, prec: str) -> WYBwdOut:
    """Launch `_kda_wy_bwd_kernel` on the (NT, HV) grid; shapes as in its docstring (contiguous, flattened; Gc
    returns the gate cumsum, called only where the kernel reads it). The gradient of Akk goes through the state
    (VIA_STATE) for fp32 inputs, through v_new otherwise."""
    via_state = k.dtype == torch.float32
    TT, H, K = k.shape
    HV, V = v.shape[1], v.shape[2]
    cfg = wy_bwd_config(arch_of(k.device), K, V)
    f32 = dict(device=k.device, dtype=torch.float32)
    out = WYBwdOut(dv=torch.empty_like(v), dvb=torch.empty(TT, HV, V, **f32), dAqk=torch.empty(TT, HV, BT, **f32),
                   dL=torch.empty(TT, HV, BT, **f32), dbeta=torch.empty(TT, HV, **f32))
    launch_kernel(_kda_wy_bwd_kernel, (plan.NT, HV),
        # without VIA_STATE the kernel reads no Gc: an fp32 tensor of this call stands in for it; of a pair (fp32
        # inputs, `gate.gate_cumsum`) it reads hi, G rounded to fp32 (2^G alone needs no more)
        k, v, Gc()[0] if via_state else out.dAqk, rstd_k, beta_act, Akk, h, v_new, dv_new, do, *out, plan.cu_seqlens,
        plan.chunk_indices,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=cfg.BK, BV=cfg.BV, V_FIRST=state_v_first, VIA_STATE=via_state, PREC=prec,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
