"""Intra-chunk stage, forward and backward. The forward (one program per chunk and v-head) forms, from the gate cumsum
(gate.py), l2norm and beta: Aqk, (I + L)^-1 and the WY factors; the backward (`_kda_intra_bwd_kernel`) their
gradients per 16-row block, with the gate gradient's per-row terms that gate.py sums.

Per chunk (G = inclusive cumsum of the gate in log2 units, scale folded into Aqk and qg):
    Aqk[i,j] = scale * sum_d q_id k_jd 2^(G_id - G_jd)            j <= i
    L[i,j]   = beta_i * sum_d k_id k_jd 2^(G_id - G_jd)            j <  i
    Akk = (I + L)^-1,  w = Akk (beta k 2^G),  u = Akk (beta v),  qg = scale q 2^G,  kg = k 2^(G_last - G)

One pass over K (after the row norms) forms Aqk, L, qg and kg and parks the right operands of w and u (beta kn 2^G,
beta v) in w and u; then (I + L)^-1 (for 16-bit inputs by doubling the inverted diagonal blocks with tensor-core
products), and w, u are formed in place.

Exactness without overflow: the chunk is cut into sub-blocks of BC rows. Row block r is anchored at its own first
row a (a token at or before every row of the block, so outputs stay strictly causal):
    2^(G_i - G_j) = 2^(G_i - G_a) * 2^(G_a - G_j)
For columns j < a both factors are <= 1. Inside the diagonal block the second factor is >= 1; it is exact while
G_a - G_i <= RANGE_MAX for every channel (always true for safe gates in [-5, 0)). Rows whose range exceeds it take
an exact per-column evaluation instead; the choice depends on tokens <= i only.
"""
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from triton_kda import backends
from triton_kda._jit import (
    _chunk_coords,
    _chunk_rows,
    _dot,
    _dot_exact,
    _finite_or_zero,
    _op,
    _state_offsets,
    _tf32_operand,
    _tf32_rest,
)
from triton_kda.configs import (
    arch_of,
    cdiv,
    intra_bwd_candidates,
    intra_bwd_config,
    intra_candidates,
    intra_config,
    pow2_ceil,
    precision_of,
    tuned,
)
from triton_kda.gate import (
    GATE_LOWER_BOUND,
    _gate_cumsum,
    _gate_cumsum_of,
    _gate_diff,
    _gate_lo,
    _gate_tile,
    gate_bwd,
    gate_mode,
)
from triton_kda.launch import launch_kernel
from triton_kda.wy import IntraOut, WYBwdOut

BWD_OP = "kda_intra_bwd"  # the chunk-local and gate backward's op name in the backend registry
RANGE_MAX = tl.constexpr(110.0)  # log2 units: 2^110 * |k| stays far inside the fp32/bf16 range


@triton.jit
def _block_inverse(L, BT: tl.constexpr, BC: tl.constexpr, PREC: tl.constexpr):
    """(I + L)^-1 for strictly lower-triangular L [BT, BT] (fp32).

    The BC x BC diagonal blocks are inverted by forward substitution, all blocks at once in a [NC, BC, BC] view;
    then X = (I + N)^-1 D^-1 with N = D^-1 E (E the strictly block-lower part) by NC - 1 block substitution steps.
    """
    NC: tl.constexpr = BT // BC
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BC)
    same = (o_t[:, None] // BC) == (o_t[None, :] // BC)
    # P[c, j] = 1 where j % BC == c: moves between the [BT, BT] and the compressed [BT, BC] diagonal forms
    P = tl.where((o_t[None, :] % BC) == o_c[:, None], 1.0, 0.0)
    Lc = tl.dot(tl.where(same, L, 0.0), tl.trans(P), input_precision="ieee")
    L3 = tl.reshape(Lc, (NC, BC, BC))
    r3 = tl.arange(0, BC)[None, :, None]
    c3 = tl.arange(0, BC)[None, None, :]
    X3 = tl.where(r3 == c3, 1.0, 0.0) + tl.zeros((NC, BC, BC), dtype=tl.float32)
    for r in tl.static_range(1, BC):
        Lr = tl.sum(tl.where(r3 == r, L3, 0.0), axis=1)
        new = tl.where(tl.arange(0, BC)[None, :] == r, 1.0, 0.0) - tl.sum(Lr[:, :, None] * X3, axis=1)
        X3 = tl.where(r3 == r, new[:, None, :], X3)
    XD = tl.where(same, tl.dot(tl.reshape(X3, (BT, BC)), P, input_precision="ieee"), 0.0)
    N = _dot(XD, tl.where(same, 0.0, L), None, PREC)
    X = XD
    for _ in tl.static_range(NC - 1):
        X = XD - _dot(N, _finite_or_zero(X), None, PREC)
    return X


@triton.jit
def _block_inverse_doubling(L, BT: tl.constexpr, PREC: tl.constexpr):
    """(I + L)^-1 for strictly lower-triangular L [BT, BT] (fp32), by doubling the size of inverted diagonal blocks.

    With X the inverse of the diagonal b x b blocks, each 2b x 2b diagonal block [A 0; C B] has the inverse
    [A^-1 0; -B^-1 C A^-1 B^-1]: X <- X - (X E) X, E the C parts of L. b = 1 needs no product (X = I - E), then
    log2(BT) - 1 steps of two products. Every intermediate is a true inverse (no alternating series), so rounding
    grows as in forward substitution. (X E) has exact zeros on and above the diagonal, which meet the rows of X at
    and after the output row: X passes through _finite_or_zero before that product. For tensor-core products
    (16-bit inputs); with IEEE fp32 products the ten 64 x 64 products cost more than `_block_inverse`.
    """
    o_t = tl.arange(0, BT)
    r = o_t[:, None]
    c = o_t[None, :]
    X = tl.where(r == c, 1.0, 0.0) - tl.where((r // 2 == c // 2) & (r > c), L, 0.0)
    for lvl in tl.static_range(1, 8):
        if (2 << lvl) <= BT:
            E = tl.where(((r >> (lvl + 1)) == (c >> (lvl + 1))) & ((r >> lvl) > (c >> lvl)), L, 0.0)
            XE = _dot(X, E, None, PREC)
            X = X - _dot(XE, _finite_or_zero(X), None, PREC)
    return X


@triton.jit
def _kda_intra_fwd_kernel(
    q, k, v, g, beta, A_log, dt_bias,
    Aqk, w, u, qg, kg, gl, rstd_q, rstd_k, beta_act, Akk,
    cu_seqlens, chunk_indices, scale, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr, STORE_AUX: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr, EXACT_ROWS: tl.constexpr, WY_OUT: tl.constexpr,
):
    """q, k: [TT, H, K]; v: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV] (flattened varlen layout).
    Writes Aqk [TT, HV, BT] (bf16 for bf16 inputs, else fp32) and, with WY_OUT, w/qg/kg [TT, HV, K] and u [TT, HV, V]
    in the input dtype and gl [NT, HV, K] fp32 (G of each chunk's last token; without WY_OUT none of these five is
    touched); with STORE_AUX also rstd_q/rstd_k/beta_act [TT, HV] fp32 and Akk [TT, HV, BT] (Aqk's dtype: the operand
    the forward's products used) for the backward."""
    i_t, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos, T, t0, n_valid, o_t, m_t = _chunk_rows(cu_seqlens, chunk_indices, i_t, BT)
    blk = o_t // BC
    NK: tl.constexpr = (K + BK - 1) // BK
    NC: tl.constexpr = BT // BC
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv

    # ---- row norms first: the pass over K below writes qg, kg and w's operand ----------------------------------
    if USE_L2NORM:
        ssq_q = tl.zeros((BT,), dtype=tl.float32)
        ssq_k = tl.zeros((BT,), dtype=tl.float32)
        for i_k in tl.static_range(NK):  # unrolled: every load issued up front
            p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
            p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
            b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
            b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32)
            ssq_q += tl.sum(b_q * b_q, axis=1)
            ssq_k += tl.sum(b_k * b_k, axis=1)
        b_rq = 1.0 / tl.sqrt(ssq_q + 1e-6)
        b_rk = 1.0 / tl.sqrt(ssq_k + 1e-6)
    else:
        b_rq = tl.full((BT,), 1.0, dtype=tl.float32)
        b_rk = tl.full((BT,), 1.0, dtype=tl.float32)
    b_beta = tl.load(beta + p_row_hv, mask=m_t, other=0.0).to(tl.float32)
    if BETA_SIGMOID:
        b_beta = BETA_SCALE * tl.sigmoid(b_beta)
    b_beta = tl.where(m_t, b_beta, 0.0)

    # ---- one pass over K: gate cumsum, anchored Aqk and L (row/column scalings applied afterwards), qg, kg, and
    # w's right operand beta kn 2^G, parked in w until (I + L)^-1 is known ------------------------------------------
    b_Aqk = tl.zeros((BT, BT), dtype=tl.float32)
    b_L = tl.zeros((BT, BT), dtype=tl.float32)
    rng = tl.zeros((BT,), dtype=tl.float32)
    # the next slice's q, k and gate are loaded before this slice's stores (a load may not pass a store that could
    # alias it, so the latency would be exposed); past K the loads are masked out
    p_qs = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_ks = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    b_qn = tl.load(p_qs, boundary_check=(0, 1))
    b_kn = tl.load(p_ks, boundary_check=(0, 1))
    b_gn = _gate_tile(g, bos, T, t0, i_hv, 0, HV, K, BT, BK)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        b_q = b_qn.to(tl.float32)
        b_k = b_kn.to(tl.float32)
        b_G = _gate_cumsum_of(b_gn, A_log, dt_bias, i_hv, i_k, lower_bound, m_t, K, BK, GATE, HAS_A_LOG,
                              HAS_DT_BIAS, PREC == "tf32x3").to(tl.float32)
        p_qs = tl.advance(p_qs, (0, BK))
        p_ks = tl.advance(p_ks, (0, BK))
        b_qn = tl.load(p_qs, boundary_check=(0, 1))
        b_kn = tl.load(p_ks, boundary_check=(0, 1))
        b_gn = _gate_tile(g, bos, T, t0, i_hv, i_k + 1, HV, K, BT, BK)
        # G at each block's first row (the anchors) [NC, BK], by reductions over the [NC, BC, BK] view (cheaper than
        # tl.gather, docs/benchmarks/NOTES.md at a24d737), and D = G - G_anchor <= 0 for every row
        b_G3 = tl.reshape(b_G, (NC, BC, BK))
        b_Ganc = tl.sum(tl.where(tl.arange(0, BC)[None, :, None] == 0, b_G3, 0.0), axis=1)
        b_D = tl.reshape(b_G3 - b_Ganc[:, None, :], (BT, BK))
        if EXACT_ROWS:
            rng = tl.maximum(rng, tl.max(-b_D, axis=1))
        b_e = tl.exp2(b_D)
        # rounded once for the NC products below (fp16 runs; unchanged otherwise)
        b_qa = _tf32_operand(b_q * b_e, PREC)
        b_ka = _tf32_operand(b_k * b_e, PREC)
        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((tl.arange(0, NC) == r)[:, None], b_Ganc, 0.0), axis=0)
            b_kc = b_k * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX))
            b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kc, 0.0)
            b_kc = _tf32_operand(tl.trans(_op(b_kc, IS_BF16)), PREC)
            rows = (blk == r)[:, None]
            b_Aqk += _dot_exact(_op(tl.where(rows, b_qa, 0.0), IS_BF16), b_kc, None, PREC)
            b_L += _dot_exact(_op(tl.where(rows, b_ka, 0.0), IS_BF16), b_kc, None, PREC)
        if WY_OUT:
            b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
            tl.store(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, b_Gl, mask=o_k < K)
            b_eG = tl.exp2(b_G)
            b_k = b_k * b_rk[:, None]
            b_q = b_q * (b_rq * scale)[:, None]
            b_w = b_k * b_beta[:, None] * b_eG
            b_kg = tl.where(m_t[:, None], b_k * tl.exp2(b_Gl[None, :] - b_G), 0.0)
            p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
            p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK),
                                     (1, 0))
            p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK),
                                     (1, 0))
            tl.store(p_w, b_w.to(p_w.dtype.element_ty), boundary_check=(0, 1))
            tl.store(p_qg, (b_q * b_eG).to(p_qg.dtype.element_ty), boundary_check=(0, 1))
            tl.store(p_kg, b_kg.to(p_kg.dtype.element_ty), boundary_check=(0, 1))
    if WY_OUT:
        for i_v in range(tl.cdiv(V, BV)):
            p_v = tl.make_block_ptr(v + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
            p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
            b_v = tl.load(p_v, boundary_check=(0, 1)).to(tl.float32) * b_beta[:, None]
            # u's right operand, parked in u like w's
            tl.store(p_u, b_v.to(p_u.dtype.element_ty), boundary_check=(0, 1))
    if EXACT_ROWS:
        exact = rng > RANGE_MAX
        if tl.max(exact.to(tl.int32), axis=0) > 0:
            # rows whose in-block gate range is too wide for the anchored product: exact, column by column
            e_Aqk = tl.zeros((BT, BT), dtype=tl.float32)
            e_L = tl.zeros((BT, BT), dtype=tl.float32)
            for i_k in range(NK):
                b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                                   HAS_A_LOG, HAS_DT_BIAS, PREC == "tf32x3").to(tl.float32)
                p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK),
                                        (1, 0))
                b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
                b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32)
                for jj in range(BT):
                    sel_j = (o_t == jj)[:, None]
                    b_kj = tl.sum(tl.where(sel_j, b_k, 0.0), 0)
                    b_Gj = tl.sum(tl.where(sel_j, b_G, 0.0), 0)
                    b_e = b_kj[None, :] * tl.exp2(tl.minimum(b_G - b_Gj[None, :], 0.0))
                    sel = (o_t == jj)[None, :]
                    e_Aqk += tl.where(sel, tl.sum(b_q * b_e, axis=1)[:, None], 0.0)
                    e_L += tl.where(sel, tl.sum(b_k * b_e, axis=1)[:, None], 0.0)
            fix = exact[:, None] & (blk[None, :] == blk[:, None])
            b_Aqk = tl.where(fix, e_Aqk, b_Aqk)
            b_L = tl.where(fix, e_L, b_L)

    m_tt = m_t[:, None] & m_t[None, :]
    b_Aqk = tl.where(m_tt & (o_t[None, :] <= o_t[:, None]), b_Aqk * (scale * b_rq)[:, None] * b_rk[None, :], 0.0)
    b_L = tl.where(m_tt & (o_t[None, :] < o_t[:, None]), b_L * (b_beta * b_rk)[:, None] * b_rk[None, :], 0.0)
    p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    tl.store(p_A, b_Aqk.to(p_A.dtype.element_ty), boundary_check=(0, 1))

    # ---- (I + L)^-1 ---------------------------------------------------------------------------------------------
    if PREC == "tf32x3":
        b_X = _finite_or_zero(_block_inverse(b_L, BT, BC, PREC))
    else:
        b_X = _finite_or_zero(_block_inverse_doubling(b_L, BT, PREC))
    if STORE_AUX:
        tl.store(rstd_q + p_row_hv, b_rq, mask=m_t)
        tl.store(rstd_k + p_row_hv, b_rk, mask=m_t)
        tl.store(beta_act + p_row_hv, b_beta, mask=m_t)
        p_X = tl.make_block_ptr(Akk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
        tl.store(p_X, tl.where(m_tt, b_X, 0.0).to(p_X.dtype.element_ty), boundary_check=(0, 1))
    # ---- w = Akk (beta kn 2^G), u = Akk (beta v) from the operands parked in w and u -----------------------------
    if WY_OUT:
        b_Xop = _tf32_operand(_op(b_X, IS_BF16), PREC)
        tl.debug_barrier()  # other threads of the program stored them
        # unrolled over the NK slices of w, then the NV slices of u: one conversion of Akk to the product's operand
        # layout serves every slice, and each slice's operand is loaded before the previous slice's result is stored
        NV: tl.constexpr = (V + BV - 1) // BV
        p_nxt = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
        b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
        for j in tl.static_range(NK + NV):
            p_cur, b_cur = p_nxt, b_nxt
            if j + 1 < NK:
                p_nxt = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, (j + 1) * BK), (BT, BK),
                                          (1, 0))
                b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
            elif j + 1 < NK + NV:
                p_nxt = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, (j + 1 - NK) * BV),
                                          (BT, BV), (1, 0))
                b_nxt = tl.load(p_nxt, boundary_check=(0, 1))
            b_res = _dot_exact(b_Xop, _op(b_cur, IS_BF16), None, PREC)  # b_cur: stored in the input dtype
            tl.store(p_cur, b_res.to(p_cur.dtype.element_ty), boundary_check=(0, 1))


def intra_fwd(q, k, v, g, beta, A_log, dt_bias, scale: float, plan, BT: int, *,
              use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, lower_bound: float | None,
              use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, store_aux: bool = False,
              wy_out: bool = True) -> IntraOut:
    """q, k: [TT, H, K]; v: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV] (contiguous, flattened).
    store_aux also writes what the backward reuses (rstd_q, rstd_k, beta, Akk); without wy_out, w, u, qg, kg and gl
    are None (`wy_recompute` forms them from the aux outputs)."""
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    dev, dt = q.device, q.dtype
    arch = arch_of(dev)
    f32 = dict(device=dev, dtype=torch.float32)
    a_dt = dt if dt == torch.bfloat16 else torch.float32
    out = IntraOut(
        Aqk=torch.empty(TT, HV, BT, device=dev, dtype=a_dt),
        w=torch.empty(TT, HV, K, device=dev, dtype=dt) if wy_out else None,
        u=torch.empty(TT, HV, V, device=dev, dtype=dt) if wy_out else None,
        qg=torch.empty(TT, HV, K, device=dev, dtype=dt) if wy_out else None,
        kg=torch.empty(TT, HV, K, device=dev, dtype=dt) if wy_out else None,
        gl=torch.empty(plan.NT, HV, K, **f32) if wy_out else None,
        rstd_q=torch.empty(TT, HV, **f32) if store_aux else None,
        rstd_k=torch.empty(TT, HV, **f32) if store_aux else None,
        beta=torch.empty(TT, HV, **f32) if store_aux else None,
        Akk=torch.empty(TT, HV, BT, device=dev, dtype=a_dt) if store_aux else None,
        rs=torch.empty(0, HV, **f32),
    )
    gate = gate_mode(use_gate_in_kernel, lower_bound)

    def launch(cfg):
        launch_kernel(_kda_intra_fwd_kernel, (plan.NT, HV),
            q, k, v, g, beta, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q,
            # every IntraOut field but rs (this kernel writes no pairs)
            *(x if x is not None else out.Aqk for x in out[:-1]), plan.cu_seqlens, plan.chunk_indices, scale,
            lower_bound if lower_bound is not None else 0.0,
            H=H, HV=HV, K=K, V=V, BT=BT, BC=cfg.BC, BK=cfg.BK, BV=cfg.BV,
            USE_L2NORM=use_qk_l2norm_in_kernel, GATE=gate, HAS_A_LOG=gate > 0 and A_log is not None,
            HAS_DT_BIAS=gate > 0 and dt_bias is not None, BETA_SIGMOID=use_beta_sigmoid_in_kernel,
            BETA_SCALE=2.0 if allow_neg_eigval else 1.0, STORE_AUX=store_aux, IS_BF16=dt == torch.bfloat16,
            PREC=precision_of(dt), WY_OUT=wy_out, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            # the lower-bound gate keeps every BC-row block's gate range under RANGE_MAX when
            # (BC - 1) |lower_bound| log2(e) does (safe gates: 108.2 < 110): no exact rows, no range check
            EXACT_ROWS=not (gate == GATE_LOWER_BOUND
                            and -lower_bound * (cfg.BC - 1) / math.log(2) <= RANGE_MAX.value - 1),
        )

    key = ("intra_fwd", arch, dt, K, V, BT, H, HV, pow2_ceil(plan.NT), gate, store_aux, wy_out)
    launch(tuned(key, intra_config(arch, K, V), intra_candidates(arch, K, V), launch))
    return out


@triton.jit
def _intra_bwd_program(cu_seqlens, chunk_indices, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                       BK: tl.constexpr):
    """Coordinates of a chunk-local backward program (grid (NT * NC, HV, NK)): chunk i_t, block r, v-head i_hv,
    K slice i_k; bos, T, the chunk's first token t0 and the block's s0 (in the sequence), n_valid (the chunk's
    tokens); the block's row offsets o_c and mask m_r, the slice's columns o_k and mask m_k."""
    i_tc, i_hv, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    NC: tl.constexpr = BT // BC
    i_t, r = i_tc // NC, i_tc % NC
    bos, T, i_c = _chunk_coords(cu_seqlens, chunk_indices, i_t)
    t0 = i_c * BT
    n_valid = tl.minimum(T - t0, BT)
    o_c = tl.arange(0, BC)
    o_k = i_k * BK + tl.arange(0, BK)
    return i_t, r, i_hv, i_k, bos, T, t0, t0 + r * BC, n_valid, o_c, r * BC + o_c < n_valid, o_k, o_k < K


@triton.jit
def _block_rows(q, k, rstd_q, rstd_k, beta_act, bos, T, s0, i_h, i_k, p_rows, m_r, scale, H: tl.constexpr,
                K: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):
    """The block's rows (BC from token s0, K slice i_k) of qn = scale rstd_q q, kn = rstd_k k [BC, BK] fp32 and
    beta [BC]; p_rows: the rows' offsets into the [TT, HV] tensors."""
    p_qr = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_kr = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    b_qn = tl.load(p_qr, boundary_check=(0, 1)).to(tl.float32)
    b_qn *= (tl.load(rstd_q + p_rows, mask=m_r, other=0.0) * scale)[:, None]
    b_kn = tl.load(p_kr, boundary_check=(0, 1)).to(tl.float32)
    b_kn *= tl.load(rstd_k + p_rows, mask=m_r, other=0.0)[:, None]
    return b_qn, b_kn, tl.load(beta_act + p_rows, mask=m_r, other=0.0)


@triton.jit
def _state_side(h, dh, v_new, dvb, do, p_state, bos, T, s0, i_hv, o_k, m_k, HV: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr,
                PREC_S: tl.constexpr, BF16_STATE: tl.constexpr):
    """The chunk-local backward's state-side products for BC rows from token s0 and the K slice o_k:
    dqg = do S^T, dkg = v_new dS^T, X = -dvb S^T [BC, BK] and rowsum(S dS) [BK] (S = h, dS = dh of the chunk at
    p_state); the arguments as in `_kda_intra_bwd_kernel`."""
    b_dqg = tl.zeros((BC, BK), dtype=tl.float32)
    b_dkg = tl.zeros((BC, BK), dtype=tl.float32)
    b_X = tl.zeros((BC, BK), dtype=tl.float32)
    b_SdS = tl.zeros((BK,), dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        b_Sr = tl.load(h + p_state + _state_offsets(o_k, o_v, K, V, V_FIRST), mask=m_kv, other=0.0)
        b_dSr = tl.load(dh + p_state + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
        p_do = tl.make_block_ptr(do + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (s0, i_v * BV), (BC, BV), (1, 0))
        p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (s0, i_v * BV), (BC, BV), (1, 0))
        p_dvb = tl.make_block_ptr(dvb + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (s0, i_v * BV), (BC, BV), (1, 0))
        b_S = b_Sr.to(tl.float32)
        b_dS = b_dSr.to(tl.float32)
        b_do = tl.load(p_do, boundary_check=(0, 1))
        b_vn = tl.load(p_vn, boundary_check=(0, 1))
        if BF16_STATE:
            b_dqg = tl.dot(b_do, tl.trans(b_Sr), b_dqg)
            b_dkg = tl.dot(b_vn, tl.trans(b_dSr), b_dkg)
        else:
            b_dqg = _dot(b_do.to(tl.float32), tl.trans(b_S), b_dqg, PREC_S)
            b_dkg = _dot(b_vn.to(tl.float32), tl.trans(b_dS), b_dkg, PREC_S)
        b_X -= _dot(tl.load(p_dvb, boundary_check=(0, 1)), tl.trans(b_S), None, PREC_S)
        b_SdS += tl.sum(b_S * b_dS, axis=1)
    return b_dqg, b_dkg, b_X, b_SdS


@triton.jit
def _kda_intra_bwd_kernel(
    q, k, Gc, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, dvb, do, dAqk, dL,
    dq, dk, dE, dF, dbeta_k,
    cu_seqlens, chunk_indices, scale, TT,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr,
    PREC: tl.constexpr, PREC_S: tl.constexpr, BF16_STATE: tl.constexpr,
):
    """Chunk-local backward of one BC-row block and K slice: one program per (chunk x block, v-head, K slice).

    q, k [TT, H, K]; Gc [TT, HV, K] fp32 (the gate cumsum G, log2 units, `gate_cumsum`); gl [NT, HV, K] fp32 (G of
    each chunk's last token); rstd_q, rstd_k, beta_act [TT, HV] fp32; h [NT, HV, K, V] ([NT, HV, V, K] if V_FIRST),
    dh [NT, HV, K, V] (both grad_state_dtype); v_new, do [TT, HV, V]; dvb [TT, HV, V], dAqk, dL [TT, HV, BT] fp32
    from `_kda_wy_bwd_kernel`. With S = h[c], dS = dh[c], qn = scale rstd_q q, kn = rstd_k k, kbn = beta kn, and for
    the block's rows i / columns j the sums over j <= i of the chunk
        Rq_i = sum_j dAqk_ij kn_j 2^(G_i - G_j),  RL_i = sum_j dL_ij kn_j 2^(G_i - G_j),
        C_j  = sum_i (dAqk_ij qn_i + dL_ij kbn_i) 2^(G_i - G_j),
    dqn = (do S^T) 2^G + Rq,  dkn = X beta 2^G + (v_new dS^T) 2^(G_last - G) + beta RL + C  (X = -dvb S^T), and
    dG, the gradient of G, from the same terms. The sums use the forward's anchored factorisation (anchor = the
    block's first row); a block whose gate range exceeds RANGE_MAX is summed exactly, column by column.
    PREC: the precision of the intra-chunk products (Rq, RL, C; "tf32blocksplit": the B operands of the block's own
    tokens as TF32 pairs, the others rounded to TF32), PREC_S of the state-side ones (do S^T, v_new dS^T,
    dvb S^T). BF16_STATE (h, dh, do and v_new all bf16): do S^T and v_new dS^T take their bf16 operands as stored
    (exact products, fp32 sums: the numbers of TF32 on the same values at twice the rate).
    Writes dq, dk [TT, HV, K] fp32 (per v-head, w.r.t. the normalised q and k), the gate gradient's terms dE, dF
    [TT, HV, K] fp32 (see below; `_kda_gate_bwd_kernel` sums them) and dbeta_k [NK, TT, HV] fp32 (the beta gradient
    through w and L, before the sigmoid).
    """
    NC: tl.constexpr = BT // BC
    i_t, r, i_hv, i_k, bos, T, t0, s0, n_valid, o_c, m_r, o_k, m_k = _intra_bwd_program(cu_seqlens, chunk_indices,
                                                                                       K, BT, BC, BK)
    i_h = i_hv // (HV // H)
    o_t = tl.arange(0, BT)
    m_t = o_t < n_valid
    m_rk = m_r[:, None] & m_k[None, :]
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv
    p_rows = (bos + s0 + o_c).to(tl.int64) * HV + i_hv
    p_state = (i_t * HV + i_hv).to(tl.int64) * K * V

    # the whole chunk's G, kn, qn and kbn (the sums reach every row), then this block's rows
    p_G = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    b_G = tl.load(p_G, boundary_check=(0, 1))
    b_G_r = tl.sum(tl.where((tl.arange(0, NC) == r)[:, None, None], tl.reshape(b_G, (NC, BC, BK)), 0.0), axis=0)
    b_Ga = tl.sum(tl.where((o_c == 0)[:, None], b_G_r, 0.0), axis=0)
    b_Gl = tl.load(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, mask=m_k, other=0.0)
    p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    b_kn = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32) * tl.load(rstd_k + p_row_hv, mask=m_t, other=0.0)[:, None]
    b_qn_r, b_kn_r, b_b_r = _block_rows(q, k, rstd_q, rstd_k, beta_act, bos, T, s0, i_h, i_k, p_rows, m_r, scale, H, K,
                                        BC, BK)

    # rows of dAqk / dL (block rows i, all columns) and columns (rows j of the transposes)
    p_dA = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, 0), (BC, BT), (1, 0))
    p_dL = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, 0), (BC, BT), (1, 0))
    p_dAt = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, t0), (BC, BT), (0, 1))
    p_dLt = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, t0), (BC, BT), (0, 1))
    b_dA = tl.load(p_dA, boundary_check=(0, 1))
    b_dL = tl.load(p_dL, boundary_check=(0, 1))
    b_dAt = tl.load(p_dAt, boundary_check=(0, 1))
    b_dLt = tl.load(p_dLt, boundary_check=(0, 1))
    b_qn = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
    b_qn *= (tl.load(rstd_q + p_row_hv, mask=m_t, other=0.0) * scale)[:, None]
    b_b = tl.load(beta_act + p_row_hv, mask=m_t, other=0.0)
    if tl.max(tl.max(tl.where(m_rk, b_Ga[None, :] - b_G_r, 0.0), axis=1), axis=0) > RANGE_MAX:
        b_Rq, b_RL, b_C = _intra_sums_exact(b_dA, b_dL, b_dAt, b_dLt, b_qn, b_kn, b_kn * b_b[:, None], b_G, b_G_r, r,
                                            BT, BC)
    else:
        # 2^(G_i - G_j) = 2^(G_i - Ga) 2^(Ga - G_j): the first factor <= 1 for the block's rows, the second <= 1 for
        # columns before the block and <= 2^RANGE_MAX inside it
        b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kn * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX)),
                        0.0)
        b_eA = tl.where(m_rk, tl.exp2(b_G_r - b_Ga[None, :]), 0.0)
        b_f = tl.where((o_t >= r * BC)[:, None], tl.exp2(tl.minimum(b_G - b_Ga[None, :], RANGE_MAX)), 0.0)
        if PREC == "tf32blocksplit":
            # the block's own tokens' B operands as TF32 pairs (`_dot`'s "tf32split"), the rest rounded: the pairs'
            # second products over the diagonal block's [BC, BC] tiles of dAqk / dL
            p_dAd = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, r * BC), (BC, BC),
                                      (1, 0))
            p_dLd = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, r * BC), (BC, BC),
                                      (1, 0))
            b_dAd = tl.load(p_dAd, boundary_check=(0, 1))
            b_dLd = tl.load(p_dLd, boundary_check=(0, 1))
            b_f_r = tl.exp2(tl.minimum(b_G_r - b_Ga[None, :], RANGE_MAX))
            b_kc_r = _tf32_rest(b_kn_r * tl.exp2(tl.minimum(b_Ga[None, :] - b_G_r, RANGE_MAX)))
            b_Rq = (_dot(b_dA, b_kc, None, "tf32rn") + _dot(b_dAd, b_kc_r, None, "tf32rn")) * b_eA
            b_RL = (_dot(b_dL, b_kc, None, "tf32rn") + _dot(b_dLd, b_kc_r, None, "tf32rn")) * b_eA
            b_C = _dot(b_dAt, b_qn * b_f, None, "tf32rn") + _dot(tl.trans(b_dAd), _tf32_rest(b_qn_r * b_f_r), None,
                                                                  "tf32rn")
            b_C += _dot(b_dLt, b_kn * b_b[:, None] * b_f, None, "tf32rn")
            b_C += _dot(tl.trans(b_dLd), _tf32_rest(b_kn_r * b_b_r[:, None] * b_f_r), None, "tf32rn")
        else:
            b_Rq = _dot(b_dA, b_kc, None, PREC) * b_eA
            b_RL = _dot(b_dL, b_kc, None, PREC) * b_eA
            b_C = _dot(b_dAt, b_qn * b_f, None, PREC)
            b_C = _dot(b_dLt, b_kn * b_b[:, None] * b_f, b_C, PREC)
        b_C *= tl.where(m_rk, tl.exp2(tl.minimum(b_Ga[None, :] - b_G_r, RANGE_MAX)), 0.0)

    # the state side for the block's rows: do S^T, v_new dS^T, X = Akk^T dw = -dvb S^T (and rowsum(S dS), once)
    b_dqg, b_dkg, b_X, b_SdS = _state_side(h, dh, v_new, dvb, do, p_state, bos, T, s0, i_hv, o_k, m_k, HV, K, V, BC,
                                           BK, BV, V_FIRST, PREC_S, BF16_STATE)
    b_eG = tl.where(m_rk, tl.exp2(b_G_r), 0.0)
    b_eGl = tl.where(m_rk, tl.exp2(b_Gl[None, :] - b_G_r), 0.0)
    b_dkgl = b_dkg * b_eGl

    b_XeGb = b_X * b_eG * b_b_r[:, None]
    b_RLb = b_RL * b_b_r[:, None]
    b_dqn = b_dqg * b_eG + b_Rq
    b_dkn = b_XeGb + b_dkgl + b_RLb + b_C
    # the gate gradient of each row m sums only terms whose decay spans m, so strong decays give small values without
    # cancellation: E (terms of G_i: qg, w, the rows and columns of Aqk / L) reaches the rows m <= i, F (terms of
    # G_last - G_j: kg) the rows m > j, the state's decay 2^G_last every row (E's last row of the chunk carries it)
    b_S_last = tl.where((r * BC + o_c == n_valid - 1)[:, None], (b_SdS * tl.exp2(b_Gl))[None, :], 0.0)
    b_E = b_kn_r * (b_XeGb + b_RLb - b_C) + b_qn_r * b_dqn + b_S_last
    tl.store(dbeta_k + (i_k * TT + bos + s0 + o_c).to(tl.int64) * HV + i_hv,
             tl.sum(b_kn_r * (b_X * b_eG + b_RL), axis=1), mask=m_r)
    p_dq = tl.make_block_ptr(dq + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_dk = tl.make_block_ptr(dk + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_dE = tl.make_block_ptr(dE + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_dF = tl.make_block_ptr(dF + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    tl.store(p_dq, b_dqn * scale, boundary_check=(0, 1))
    tl.store(p_dk, b_dkn, boundary_check=(0, 1))
    tl.store(p_dE, b_E, boundary_check=(0, 1))
    tl.store(p_dF, b_dkgl * b_kn_r, boundary_check=(0, 1))


@triton.jit
def _intra_sums_exact(b_dA, b_dL, b_dAt, b_dLt, b_qn, b_kn, b_kbn, b_G, b_G_r, r, BT: tl.constexpr,
                      BC: tl.constexpr):
    """The intra-chunk sums of `_kda_intra_bwd_kernel` for block r, exact for any gate range (column by column):
    rows Rq, RL [BC, BK] from the block's rows of dAqk / dL (b_dA, b_dL [BC, BT]); columns C [BC, BK] from their
    columns (b_dAt, b_dLt [BC, BT], transposed); b_qn, b_kn, b_kbn, b_G [BT, BK] whole chunk, b_G_r [BC, BK] the
    block's rows."""
    o_t = tl.arange(0, BT)
    o_c = tl.arange(0, BC)
    o_r = r * BC + o_c
    b_Rq = tl.zeros(b_G_r.shape, dtype=tl.float32)
    b_RL = tl.zeros(b_G_r.shape, dtype=tl.float32)
    for j in range((r + 1) * BC):
        sel = (o_t == j)[:, None]
        b_Gj = tl.sum(tl.where(sel, b_G, 0.0), axis=0)
        b_knj = tl.sum(tl.where(sel, b_kn, 0.0), axis=0)
        b_E = tl.where((o_r >= j)[:, None], tl.exp2(tl.minimum(b_G_r - b_Gj[None, :], 0.0)), 0.0)
        b_Rq += tl.sum(tl.where((o_t == j)[None, :], b_dA, 0.0), axis=1)[:, None] * b_knj[None, :] * b_E
        b_RL += tl.sum(tl.where((o_t == j)[None, :], b_dL, 0.0), axis=1)[:, None] * b_knj[None, :] * b_E
    b_C = tl.zeros(b_G_r.shape, dtype=tl.float32)
    for jj in range(BC):
        sel = (o_c == jj)[:, None]
        b_Gj = tl.sum(tl.where(sel, b_G_r, 0.0), axis=0)
        b_E = tl.where((o_t >= r * BC + jj)[:, None], tl.exp2(tl.minimum(b_G - b_Gj[None, :], 0.0)), 0.0)
        b_a = tl.sum(tl.where(sel, b_dAt, 0.0), axis=0)
        b_l = tl.sum(tl.where(sel, b_dLt, 0.0), axis=0)
        b_C += tl.where(sel, tl.sum((b_a[:, None] * b_qn + b_l[:, None] * b_kbn) * b_E, axis=0)[None, :], 0.0)
    return b_Rq, b_RL, b_C


@triton.jit
def _kda_intra_bwd_span_kernel(
    q, k, Gc, Gc_lo, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, dvb, do, dAqk, dL,
    dq, dk, dD, dW, dbeta_k,
    cu_seqlens, chunk_indices, scale, TT,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, V_FIRST: tl.constexpr,
    PREC: tl.constexpr, PREC_S: tl.constexpr, BF16_STATE: tl.constexpr, GC_PAIR: tl.constexpr,
):
    """`_kda_intra_bwd_kernel` with the gate gradient in its spanning form (fp16 and fp32 inputs): the same grid,
    inputs and dq, dk, dbeta_k; the sums split by BC-row block.

    Columns j in an earlier block and rows i in a later block are anchored at the boundary between the blocks (both
    factors <= 1 for any gate range); pairs inside the block at its first row a, or summed exactly column by column
    where G_a - G_i exceeds RANGE_MAX. dgate_m (the gradient of G at row m) sums each term for the rows its decay
    spans: the pair terms t_ij = (dAqk_ij qn_i + dL_ij kbn_i) kn_j 2^(G_i - G_j) for j < m <= i, the state-side
    terms of rows i >= m and the kg terms of rows j < m; strong decays then leave nothing to cancel across blocks.
    This program writes dD [TT, HV, K] fp32, the part from its own block's rows, and block sums dW
    [NT, NC + 1, NC + 1, HV, K] fp32: dW[c, r, 0] the state-side terms of block r (they span every earlier block),
    dW[c, r, s + 1] the pair terms with the column in block s < r (they span the blocks between) and
    dW[c, NC, r + 1] the kg terms of block r (they span every later block); `_kda_gate_bwd_kernel` adds them up.
    Inside a block the pair terms enter as row minus column sums (cancelling at most the block's own off-diagonal
    pairs). GC_PAIR (fp32 inputs, `gate.gate_cumsum_pair`): G is the fp32 pair Gc + Gc_lo (else Gc alone, Gc_lo
    unread), every exponent a difference of pairs (`_gate_diff`), and G of the chunk's last token comes from the pair,
    not from its fp32 rounding in gl.
    """
    NC: tl.constexpr = BT // BC
    i_t, r, i_hv, i_k, bos, T, t0, s0, n_valid, o_c, m_r, o_k, m_k = _intra_bwd_program(cu_seqlens, chunk_indices,
                                                                                       K, BT, BC, BK)
    i_h = i_hv // (HV // H)
    m_rk = m_r[:, None] & m_k[None, :]
    p_rows = (bos + s0 + o_c).to(tl.int64) * HV + i_hv
    p_state = (i_t * HV + i_hv).to(tl.int64) * K * V
    p_W = dW + (i_t * (NC + 1) * (NC + 1) * HV + i_hv).to(tl.int64) * K + o_k  # dW[i_t, :, :, i_hv, o_k]

    # this block's rows: G (anchor Ga = its first row), qn, kn, beta; u = qn 2^(G - Ga), w = kbn 2^(G - Ga); and the
    # block's own [BC, BC] tiles of dAqk and dL, as rows and as columns
    # (G tiles and rows as hi and lo: `_gate_diff`; lo is hi itself without GC_PAIR)
    p_Gr = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_Gr_lo = tl.make_block_ptr(Gc_lo + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    b_G_r = tl.load(p_Gr, boundary_check=(0, 1))
    b_G_r_lo = _gate_lo(p_Gr_lo, b_G_r, GC_PAIR)
    b_Ga = tl.sum(tl.where((o_c == 0)[:, None], b_G_r, 0.0), axis=0)
    b_Ga_lo = tl.sum(tl.where((o_c == 0)[:, None], b_G_r_lo, 0.0), axis=0)
    if GC_PAIR:
        # G of the chunk's last token as the pair holds it (gl is its fp32 rounding)
        p_last = ((bos + t0 + n_valid - 1) * HV + i_hv).to(tl.int64) * K + o_k
        b_Gl = tl.load(Gc + p_last, mask=m_k, other=0.0)
        b_Gl_lo = tl.load(Gc_lo + p_last, mask=m_k, other=0.0)
    else:
        b_Gl = tl.load(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, mask=m_k, other=0.0)
        b_Gl_lo = b_Gl
    b_qn_r, b_kn_r, b_b_r = _block_rows(q, k, rstd_q, rstd_k, beta_act, bos, T, s0, i_h, i_k, p_rows, m_r, scale, H, K,
                                        BC, BK)
    b_kbn_r = b_kn_r * b_b_r[:, None]
    b_eA = tl.where(m_rk, tl.exp2(_gate_diff(b_G_r, b_G_r_lo, b_Ga[None, :], b_Ga_lo[None, :], GC_PAIR)), 0.0)
    b_u = b_qn_r * b_eA
    b_w = b_kbn_r * b_eA
    p_dA = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, r * BC), (BC, BC), (1, 0))
    p_dL = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, r * BC), (BC, BC), (1, 0))
    p_dAt = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, s0), (BC, BC), (0, 1))
    p_dLt = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, s0), (BC, BC), (0, 1))
    b_dA = tl.load(p_dA, boundary_check=(0, 1))
    b_dL = tl.load(p_dL, boundary_check=(0, 1))
    b_dAt = tl.load(p_dAt, boundary_check=(0, 1))
    b_dLt = tl.load(p_dLt, boundary_check=(0, 1))

    # the state side first, so that everything below folds into a few accumulators: dqn, dkn, dbk (the beta
    # gradient's tile), up (gate terms reaching the rows m <= i) and dn (reaching the rows m > j)
    b_dqg, b_dkg, b_X, b_SdS = _state_side(h, dh, v_new, dvb, do, p_state, bos, T, s0, i_hv, o_k, m_k, HV, K, V, BC,
                                           BK, BV, V_FIRST, PREC_S, BF16_STATE)
    b_eG = tl.where(m_rk, tl.exp2(b_G_r), 0.0)  # hi: G rounded to fp32 once
    b_dqn = b_dqg * b_eG
    b_dbk = b_X * b_eG
    b_dkgl = b_dkg * tl.where(m_rk, tl.exp2(_gate_diff(b_Gl[None, :], b_Gl_lo[None, :], b_G_r, b_G_r_lo, GC_PAIR)),
                              0.0)
    b_dkn = b_dbk * b_b_r[:, None] + b_dkgl
    # terms of G_i (qg, w; the state's decay 2^G_last on the chunk's last row) reach the rows m <= i, terms of -G_j
    # (kg) the rows m > j
    b_up = b_kbn_r * b_dbk + b_qn_r * b_dqn
    b_up += tl.where((r * BC + o_c == n_valid - 1)[:, None], (b_SdS * tl.exp2(b_Gl))[None, :], 0.0)
    b_dn = b_kn_r * b_dkgl
    tl.store(p_W + r * (NC + 1) * HV * K, tl.sum(b_up, axis=0), mask=m_k)
    tl.store(p_W + (NC * (NC + 1) + r + 1) * HV * K, tl.sum(b_dn, axis=0), mask=m_k)

    # columns in an earlier block s (anchor Ga), block sums to dW[r, s + 1]
    for s in range(r):
        p_dAs = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, s * BC), (BC, BC), (1, 0))
        p_dLs = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (s0, s * BC), (BC, BC), (1, 0))
        p_ks = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0 + s * BC, i_k * BK), (BC, BK), (1, 0))
        p_Gs = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0 + s * BC, i_k * BK), (BC, BK),
                                 (1, 0))
        p_Gs_lo = tl.make_block_ptr(Gc_lo + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0 + s * BC, i_k * BK),
                                    (BC, BK), (1, 0))
        b_rk = tl.load(rstd_k + (bos + t0 + s * BC + o_c).to(tl.int64) * HV + i_hv, mask=s * BC + o_c < n_valid,
                       other=0.0)
        b_kc = tl.load(p_ks, boundary_check=(0, 1)).to(tl.float32) * b_rk[:, None]
        b_Gs = tl.load(p_Gs, boundary_check=(0, 1))
        b_kc *= tl.exp2(tl.minimum(_gate_diff(b_Ga[None, :], b_Ga_lo[None, :], b_Gs, _gate_lo(p_Gs_lo, b_Gs, GC_PAIR),
                                              GC_PAIR), RANGE_MAX))
        b_Rs = _dot(tl.load(p_dAs, boundary_check=(0, 1)), b_kc, None, PREC)
        b_Ls = _dot(tl.load(p_dLs, boundary_check=(0, 1)), b_kc, None, PREC)
        b_Ws = b_u * b_Rs + b_w * b_Ls
        tl.store(p_W + (r * (NC + 1) + s + 1) * HV * K, tl.sum(b_Ws, axis=0), mask=m_k)
        b_up += b_Ws
        b_dqn += b_Rs * b_eA
        b_dbk += b_Ls * b_eA
        b_dkn += b_Ls * b_eA * b_b_r[:, None]

    # rows in a later block b (anchor Gn = the next block's first row), block by block: one [BC, BT] x [BT, BK]
    # product over the whole chunk spent half its work on the zero rows of blocks <= r (H200, B2 T8192 H32 Kimi flags:
    # fp32 6666 -> 5257 us, docs/benchmarks/runs/2026-11-28_fp32_configs)
    if (r + 1) * BC < n_valid:
        p_Gn = ((bos + t0 + (r + 1) * BC) * HV + i_hv).to(tl.int64) * K + o_k
        b_Gn = tl.load(Gc + p_Gn, mask=m_k, other=0.0)
        b_Gn_lo = tl.load(Gc_lo + p_Gn, mask=m_k, other=0.0) if GC_PAIR else b_Gn
        b_C = tl.zeros((BC, BK), dtype=tl.float32)
        for b in range(r + 1, NC):
            s_b = t0 + b * BC
            m_b = b * BC + o_c < n_valid
            b_qn_b, b_kn_b, b_b_b = _block_rows(q, k, rstd_q, rstd_k, beta_act, bos, T, s_b, i_h, i_k,
                                                (bos + s_b + o_c).to(tl.int64) * HV + i_hv, m_b, scale, H, K, BC, BK)
            p_Gb = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s_b, i_k * BK), (BC, BK),
                                     (1, 0))
            p_Gb_lo = tl.make_block_ptr(Gc_lo + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s_b, i_k * BK), (BC, BK),
                                        (1, 0))
            b_Gb = tl.load(p_Gb, boundary_check=(0, 1))
            b_f = tl.where(m_b[:, None], tl.exp2(tl.minimum(_gate_diff(b_Gb, _gate_lo(p_Gb_lo, b_Gb, GC_PAIR),
                                                                       b_Gn[None, :], b_Gn_lo[None, :], GC_PAIR),
                                                            RANGE_MAX)), 0.0)
            p_dAc = tl.make_block_ptr(dAqk + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, s_b), (BC, BC),
                                      (0, 1))
            p_dLc = tl.make_block_ptr(dL + (bos * HV + i_hv) * BT, (BT, T), (1, HV * BT), (r * BC, s_b), (BC, BC),
                                      (0, 1))
            b_C = _dot(tl.load(p_dAc, boundary_check=(0, 1)), b_qn_b * b_f, b_C, PREC)
            b_C = _dot(tl.load(p_dLc, boundary_check=(0, 1)), b_kn_b * b_b_b[:, None] * b_f, b_C, PREC)
        b_C *= tl.where(m_rk, tl.exp2(tl.minimum(_gate_diff(b_Gn[None, :], b_Gn_lo[None, :], b_G_r, b_G_r_lo, GC_PAIR),
                                                 RANGE_MAX)), 0.0)
        b_dkn += b_C
        b_dn += b_kn_r * b_C

    # pairs inside the block (anchor Ga, or exact column by column where G_a - G_i exceeds RANGE_MAX). The diagonal
    # pairs (i = j: no decay) go to dq and dk directly and stay out of the row and column sums: they span no row, and
    # in `b_up` they would cancel only to an ulp of their size, the largest in the block (fp32, interpreter, two seeds,
    # docs/benchmarks/runs/2026-11-28_dalog/g_rounding.py: dg 5.0e-7 / 6.1e-7 -> 2.5e-7 / 3.4e-7 in the unsaturated
    # lower-bound regime, 1.2e-6 / 1.1e-6 -> 7.6e-7 / 8.4e-7 in the masked one)
    b_eye = o_c[:, None] == o_c[None, :]
    b_dA_ii = tl.sum(tl.where(b_eye, b_dA, 0.0), axis=1)
    b_dA = tl.where(b_eye, 0.0, b_dA)
    b_dAt = tl.where(b_eye, 0.0, b_dAt)
    b_dqn += b_dA_ii[:, None] * b_kn_r
    b_dkn += b_dA_ii[:, None] * b_qn_r
    if tl.max(tl.max(tl.where(m_rk, b_Ga[None, :] - b_G_r, 0.0), axis=1), axis=0) > RANGE_MAX:
        b_Rq, b_RL, b_C = _inblock_exact(b_dA, b_dL, b_qn_r, b_kn_r, b_kbn_r, b_G_r, b_G_r_lo, BC, GC_PAIR)
    else:
        b_eB = tl.where(m_rk, tl.exp2(_gate_diff(b_Ga[None, :], b_Ga_lo[None, :], b_G_r, b_G_r_lo, GC_PAIR)),
                        0.0)  # <= 2^RANGE_MAX
        b_ka = b_kn_r * b_eB
        b_Rq = _dot(b_dA, b_ka, None, PREC) * b_eA
        b_RL = _dot(b_dL, b_ka, None, PREC) * b_eA
        b_C = _dot(b_dAt, b_u, None, PREC)
        b_C = _dot(b_dLt, b_w, b_C, PREC) * b_eB
    b_dqn += b_Rq
    b_dbk += b_RL
    b_dkn += b_RL * b_b_r[:, None] + b_C
    b_up += b_qn_r * b_Rq + b_kbn_r * b_RL - b_kn_r * b_C

    tl.store(dbeta_k + (i_k * TT + bos + s0 + o_c).to(tl.int64) * HV + i_hv, tl.sum(b_kn_r * b_dbk, axis=1), mask=m_r)
    p_dq = tl.make_block_ptr(dq + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_dk = tl.make_block_ptr(dk + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    p_dD = tl.make_block_ptr(dD + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (s0, i_k * BK), (BC, BK), (1, 0))
    tl.store(p_dq, b_dqn * scale, boundary_check=(0, 1))
    tl.store(p_dk, b_dkn, boundary_check=(0, 1))
    tl.store(p_dD, tl.cumsum(b_up, axis=0, reverse=True) + _cumsum_exclusive(b_dn), boundary_check=(0, 1))


@triton.jit
def _scan_exclusive(e1, t1, e2, t2):
    # (sum before the segment's last element, segment total)
    return t1 + e2, t1 + t2


@triton.jit
def _cumsum_exclusive(x):
    """sum_{j < m} x_j along axis 0, without subtracting x_m from an inclusive sum."""
    e, _ = tl.associative_scan((tl.zeros_like(x), x), 0, _scan_exclusive)
    return e


@triton.jit
def _inblock_exact(b_dA, b_dL, b_qn, b_kn, b_kbn, b_G, b_G_lo, BC: tl.constexpr, PAIR: tl.constexpr):
    """The in-block sums of `_kda_intra_bwd_span_kernel`, exact for any gate range (column by column): Rq, RL, C
    [BC, BK]; b_dA, b_dL [BC, BC]; b_qn, b_kn, b_kbn, b_G (hi), b_G_lo [BC, BK] the block's rows (`_gate_diff`)."""
    o_c = tl.arange(0, BC)
    b_Rq = tl.zeros(b_G.shape, dtype=tl.float32)
    b_RL = tl.zeros(b_G.shape, dtype=tl.float32)
    b_C = tl.zeros(b_G.shape, dtype=tl.float32)
    for j in range(BC):
        sel = (o_c == j)[:, None]
        b_Gj = tl.sum(tl.where(sel, b_G, 0.0), axis=0)
        b_Gj_lo = tl.sum(tl.where(sel, b_G_lo, 0.0), axis=0)
        b_knj = tl.sum(tl.where(sel, b_kn, 0.0), axis=0)
        b_E = tl.where(o_c[:, None] >= j,
                       tl.exp2(tl.minimum(_gate_diff(b_G, b_G_lo, b_Gj[None, :], b_Gj_lo[None, :], PAIR), 0.0)), 0.0)
        b_a = tl.sum(tl.where((o_c == j)[None, :], b_dA, 0.0), axis=1)
        b_l = tl.sum(tl.where((o_c == j)[None, :], b_dL, 0.0), axis=1)
        b_Rq += b_a[:, None] * b_knj[None, :] * b_E
        b_RL += b_l[:, None] * b_knj[None, :] * b_E
        b_C = tl.where(sel, tl.sum((b_a[:, None] * b_qn + b_l[:, None] * b_kbn) * b_E, axis=0)[None, :], b_C)
    return b_Rq, b_RL, b_C


class IntraBwdOut(NamedTuple):
    dq: torch.Tensor                    # [TT, HV, K] fp32, per v-head partials w.r.t. the normalised q; with
    dk: torch.Tensor                    #   qk_final [TT, H, K] in q's dtype, the final gradients (k likewise)
    dg: torch.Tensor                    # [TT, HV, K] in g's dtype, w.r.t. the raw gate input
    dbeta: torch.Tensor                 # [NK, TT, HV] fp32, per-K-slice beta gradient through w and L
    dA_log_part: torch.Tensor | None    # [NK, NT, HV] fp32 partials of dA_log (with A_log in the gate)
    ddt_bias_part: torch.Tensor | None  # [NT, HV, K] fp32 per-chunk partials of ddt_bias (with dt_bias)
    qk_final: bool                      # dq, dk are final (GVA sum and l2norm backward done: the compiled kernel)


class IntraLocalOut(NamedTuple):
    """The chunk-local kernel's outputs: what `gate_bwd` sums (dD, dW, BC) and the per-v-head partials."""
    dq: torch.Tensor     # [TT, HV, K] fp32, per v-head partials w.r.t. the normalised q
    dk: torch.Tensor     # [TT, HV, K] fp32, per v-head partials w.r.t. the normalised k
    dD: torch.Tensor     # [TT, HV, K] fp32, the gate gradient's row terms (E of the E-form)
    dW: torch.Tensor     # E-form: [TT, HV, K] fp32 (F); span: [NT, NC + 1, NC + 1, HV, K] fp32
    dbeta: torch.Tensor  # [NK, TT, HV] fp32, per-K-slice beta gradient through w and L
    BC: int              # the span form's block rows (gate_bwd's BC), 0 for the E-form


def intra_local_bwd(q, k, Gc, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy: WYBwdOut, do, scale: float, plan,
                    BT: int, *, gate: int, state_v_first: bool, prec: str, prec_state: str,
                    span: bool) -> IntraLocalOut:
    """The chunk-local backward: `_kda_intra_bwd_span_kernel` (span) or `_kda_intra_bwd_kernel` on the
    (NT * NC, HV, NK) grid; shapes as in their docstrings (contiguous, flattened to TT tokens); gate: the GATE
    constexpr (part of the launch-table key); wy: `wy_bwd`'s outputs; Gc: `gate.gate_cumsum`'s (the E-form reads hi of
    a pair)."""
    TT, H, K = q.shape
    HV, V = Gc.shape[-2], v_new.shape[2]
    pair = Gc.dim() == 4  # (hi, lo) for fp32 inputs
    hi = Gc[0] if pair else Gc
    G = (hi, Gc[1] if pair else hi) if span else (hi,)
    arch = arch_of(q.device)
    f32 = dict(device=q.device, dtype=torch.float32)
    dq, dk, dD = (torch.empty(TT, HV, K, **f32) for _ in range(3))
    bf16_state = all(x.dtype == torch.bfloat16 for x in (h, dh, do, v_new))
    kernel = _kda_intra_bwd_span_kernel if span else _kda_intra_bwd_kernel

    def launch(cfg):
        """Run the kernel with `cfg`; returns its per-K-slice beta partials and the gate gradient's second input (dW
        with span, else dF; their shapes follow BK and BC)."""
        NC, NK = BT // cfg.BC, cdiv(K, cfg.BK)
        dbeta = torch.empty(NK, TT, HV, **f32)
        dW = torch.empty(plan.NT, NC + 1, NC + 1, HV, K, **f32) if span else torch.empty(TT, HV, K, **f32)
        launch_kernel(kernel, (plan.NT * NC, HV, NK),
            q, k, *G, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy.dvb, do, wy.dAqk, wy.dL, dq, dk, dD, dW, dbeta,
            plan.cu_seqlens, plan.chunk_indices, scale, TT,
            H=H, HV=HV, K=K, V=V, BT=BT, BC=cfg.BC, BK=cfg.BK, BV=cfg.BV, V_FIRST=state_v_first, PREC=prec,
            PREC_S=prec_state, BF16_STATE=bf16_state, **(dict(GC_PAIR=pair) if span else {}),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
        return dbeta, dW

    key = ("intra_bwd", arch, q.dtype, h.dtype, K, V, BT, H, HV, pow2_ceil(plan.NT), gate, span)
    table = intra_bwd_config(arch, K, V, span, prec_state == "f16x3")
    cfg = tuned(key, table, intra_bwd_candidates(arch, K, V), launch)
    dbeta, dW = launch(cfg)
    return IntraLocalOut(dq, dk, dD, dW, dbeta, cfg.BC if span else 0)


def intra_bwd(q, k, g, A_log, dt_bias, Gc: Callable[[], torch.Tensor], gl, rstd_q, rstd_k, beta_act, h, dh, v_new,
              wy: WYBwdOut, do, scale: float, plan, BT: int, *, gate: int, lower_bound: float | None,
              state_v_first: bool, prec: str, prec_state: str, span: bool, l2norm: bool) -> IntraBwdOut:
    """`intra_local_bwd`, then `_kda_gate_bwd_kernel` on (NT, HV, NK) (gate.py's `gate_bwd`); A_log [HV] and
    dt_bias [HV * K] or None; Gc returns the gate cumsum (called only for these Triton kernels); l2norm: the forward's
    use_qk_l2norm_in_kernel; the rest as in `intra_local_bwd`. Both are op `kda_intra_bwd` of the backend registry:
    a compiled backend that takes the call (cuda_fast.sm90_bwd: bf16 training on sm_90 / sm_100) runs them as one
    kernel that forms the gate cumsum itself, where H == HV with the q/k backward too (qk_final), and
    `backend_report()` says which ran and why."""
    args = dict(q=q, k=k, g=g, h=h, dh=dh, do=do, v_new=v_new, K=q.shape[2], V=v_new.shape[2], BT=BT, HV=g.shape[1],
                state_v_first=state_v_first, span=span)
    backend = backends.select(BWD_OP, args, q.device)
    if backend.fn is not None:
        return IntraBwdOut(*backend.fn(q, k, g, A_log, dt_bias, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy.dvb, do,
                                       wy.dAqk, wy.dL, plan, scale, gate, lower_bound, l2norm))
    lo = intra_local_bwd(q, k, Gc(), gl, rstd_q, rstd_k, beta_act, h, dh, v_new, wy, do, scale, plan, BT, gate=gate,
                         state_v_first=state_v_first, prec=prec, prec_state=prec_state, span=span)
    dg, dA_log_part, ddt_bias_part = gate_bwd(g, A_log, dt_bias, lo.dD, lo.dW, plan, BT, lo.BC, gate=gate,
                                              lower_bound=lower_bound)
    return IntraBwdOut(lo.dq, lo.dk, dg, lo.dbeta, dA_log_part, ddt_bias_part, False)
