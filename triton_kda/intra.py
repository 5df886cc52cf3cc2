"""Intra-chunk stage (forward): gate, cumsum, l2norm, beta, Aqk, (I + L)^-1 and the WY factors, one program per
(chunk, v-head).

Per chunk (G = inclusive cumsum of the gate in log2 units, scale folded into Aqk and qg):
    Aqk[i,j] = scale * sum_d q_id k_jd 2^(G_id - G_jd)            j <= i
    L[i,j]   = beta_i * sum_d k_id k_jd 2^(G_id - G_jd)            j <  i
    Akk = (I + L)^-1,  w = Akk (beta k 2^G),  u = Akk (beta v),  qg = scale q 2^G,  kg = k 2^(G_last - G)

Exactness without overflow: the chunk is cut into sub-blocks of BC rows. Row block r is anchored at its own first
row a (a token at or before every row of the block, so outputs stay strictly causal):
    2^(G_i - G_j) = 2^(G_i - G_a) * 2^(G_a - G_j)
For columns j < a both factors are <= 1. Inside the diagonal block the second factor is >= 1; it is exact while
G_a - G_i <= RANGE_MAX for every channel (always true for safe gates in [-5, 0)). Rows whose range exceeds it take
an exact per-column evaluation instead; the choice depends on tokens <= i only.
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from triton_kda.configs import _kpad, arch_of, intra_config
from triton_kda.gate import kda_gate_act, kda_gate_act_bwd

LOG2E = tl.constexpr(1.4426950408889634)
RANGE_MAX = tl.constexpr(110.0)  # log2 units: 2^110 * |k| stays far inside the fp32/bf16 range


@triton.jit
def _op(x, IS_BF16: tl.constexpr):
    """Operand dtype of the tensor-core products: bf16 for bf16 inputs, fp32 otherwise."""
    if IS_BF16:
        x = x.to(tl.bfloat16)
    else:
        x = x.to(tl.float32)
    return x


@triton.jit
def _chunk_coords(cu_seqlens, chunk_indices, i_t):
    """(bos int64, sequence length int32, chunk index within the sequence int32) for chunk i_t.

    Block-pointer offsets are sequence-local (int32); the int64 part lives in the base pointer."""
    i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
    i_c = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int32)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    return bos, (eos - bos).to(tl.int32), i_c


@triton.jit
def _finite_or_zero(x):
    """Non-finite entries (NaN, +-inf) -> 0. Applied to operands whose rows past t may hold an overflowed future
    (an exploding recurrence) before a full-matrix product, where 0 * inf would leak NaN into rows <= t."""
    return tl.where(tl.abs(x) < 3.0e38, x, 0.0)


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
    N = tl.dot(XD, tl.where(same, 0.0, L), input_precision=PREC)
    X = XD
    for _ in tl.static_range(NC - 1):
        X = XD - tl.dot(N, _finite_or_zero(X), input_precision=PREC)
    return X


@triton.jit
def _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t,
                 HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr):
    """Inclusive in-chunk cumsum (log2 units) of the activated gate for K slice i_k: [BT, BK] fp32, zero past the
    sequence end and past K (so the last row holds the last valid token's value)."""
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    p_g = tl.make_block_ptr(g + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    b_g = tl.load(p_g, boundary_check=(0, 1)).to(tl.float32)
    if GATE > 0:
        if HAS_DT_BIAS:
            b_g += tl.load(dt_bias + i_hv * K + o_k, mask=m_k, other=0.0).to(tl.float32)[None, :]
        if HAS_A_LOG:
            a = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
        else:
            a = 1.0
        b_g = kda_gate_act(b_g, a, lower_bound, GATE)
    return tl.cumsum(tl.where(m_t[:, None] & m_k[None, :], b_g, 0.0), axis=0) * LOG2E


@triton.jit
def _kda_intra_fwd_kernel(
    q, k, v, g, beta, A_log, dt_bias,
    Aqk, w, u, qg, kg, gl, gcum, rstd_q, rstd_k, beta_act, Akk,
    cu_seqlens, chunk_indices, scale, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr, STORE_AUX: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr,
):
    """q, k: [TT, H, K]; v: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV] (flattened varlen layout).
    Writes Aqk [TT, HV, BT] (bf16 for bf16 inputs, else fp32), w/qg/kg [TT, HV, K] and u [TT, HV, V] in the input
    dtype, gl [NT, HV, K] fp32 (G of each chunk's last token); with STORE_AUX also gcum [TT, HV, K] fp32,
    rstd_q/rstd_k/beta_act [TT, HV] fp32 and Akk [TT, HV, BT] fp32 for the backward."""
    i_t, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos, T, i_c = _chunk_coords(cu_seqlens, chunk_indices, i_t)
    t0 = i_c * BT
    n_valid = tl.minimum(T - t0, BT)
    o_t = tl.arange(0, BT)
    m_t = o_t < n_valid
    blk = o_t // BC
    NK: tl.constexpr = (K + BK - 1) // BK
    NC: tl.constexpr = BT // BC
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv

    # ---- pass 1 over K: gate cumsum, norms, anchored Aqk and L (row/column scalings applied afterwards) --------
    b_Aqk = tl.zeros((BT, BT), dtype=tl.float32)
    b_L = tl.zeros((BT, BT), dtype=tl.float32)
    rng = tl.zeros((BT,), dtype=tl.float32)
    ssq_q = tl.zeros((BT,), dtype=tl.float32)
    ssq_k = tl.zeros((BT,), dtype=tl.float32)
    for i_k in range(NK):
        b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                           HAS_A_LOG, HAS_DT_BIAS)
        o_k = i_k * BK + tl.arange(0, BK)
        b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
        tl.store(gl + (i_t * HV + i_hv).to(tl.int64) * K + o_k, b_Gl, mask=o_k < K)
        p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
        b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32)
        if USE_L2NORM:
            ssq_q += tl.sum(b_q * b_q, axis=1)
            ssq_k += tl.sum(b_k * b_k, axis=1)
        # each row's anchor: the first row of its BC-row block
        b_Ganc = tl.zeros((BT, BK), dtype=tl.float32)
        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((o_t == r * BC)[:, None], b_G, 0.0), 0)
            b_Ganc += tl.where((blk == r)[:, None], b_Ga[None, :], 0.0)
        rng = tl.maximum(rng, tl.max(b_Ganc - b_G, axis=1))
        b_e = tl.exp2(b_G - b_Ganc)
        b_qa = b_q * b_e
        b_ka = b_k * b_e
        for r in tl.static_range(NC):
            b_Ga = tl.sum(tl.where((o_t == r * BC)[:, None], b_G, 0.0), 0)
            b_kc = b_k * tl.exp2(tl.minimum(b_Ga[None, :] - b_G, RANGE_MAX))
            b_kc = tl.where((o_t < (r + 1) * BC)[:, None], b_kc, 0.0)
            b_kc = tl.trans(_op(b_kc, IS_BF16))
            rows = (blk == r)[:, None]
            b_Aqk += tl.dot(_op(tl.where(rows, b_qa, 0.0), IS_BF16), b_kc, input_precision=PREC)
            b_L += tl.dot(_op(tl.where(rows, b_ka, 0.0), IS_BF16), b_kc, input_precision=PREC)
    exact = rng > RANGE_MAX
    if tl.max(exact.to(tl.int32), axis=0) > 0:
        # rows whose in-block gate range is too wide for the anchored product: exact, column by column
        e_Aqk = tl.zeros((BT, BT), dtype=tl.float32)
        e_L = tl.zeros((BT, BT), dtype=tl.float32)
        for i_k in range(NK):
            b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                               HAS_A_LOG, HAS_DT_BIAS)
            p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
            p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
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

    if USE_L2NORM:
        b_rq = 1.0 / tl.sqrt(ssq_q + 1e-6)
        b_rk = 1.0 / tl.sqrt(ssq_k + 1e-6)
    else:
        b_rq = tl.full((BT,), 1.0, dtype=tl.float32)
        b_rk = tl.full((BT,), 1.0, dtype=tl.float32)
    b_beta = tl.load(beta + p_row_hv, mask=m_t, other=0.0).to(tl.float32)
    if BETA_SIGMOID:
        b_beta = BETA_SCALE * tl.sigmoid(b_beta)
    b_beta = tl.where(m_t, b_beta, 0.0)
    m_tt = m_t[:, None] & m_t[None, :]
    b_Aqk = tl.where(m_tt & (o_t[None, :] <= o_t[:, None]), b_Aqk * (scale * b_rq)[:, None] * b_rk[None, :], 0.0)
    b_L = tl.where(m_tt & (o_t[None, :] < o_t[:, None]), b_L * (b_beta * b_rk)[:, None] * b_rk[None, :], 0.0)
    p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    tl.store(p_A, b_Aqk.to(p_A.dtype.element_ty), boundary_check=(0, 1))

    # ---- (I + L)^-1 ---------------------------------------------------------------------------------------------
    b_X = _finite_or_zero(_block_inverse(b_L, BT, BC, PREC))
    if STORE_AUX:
        tl.store(rstd_q + p_row_hv, b_rq, mask=m_t)
        tl.store(rstd_k + p_row_hv, b_rk, mask=m_t)
        tl.store(beta_act + p_row_hv, b_beta, mask=m_t)
        p_X = tl.make_block_ptr(Akk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
        tl.store(p_X, tl.where(m_tt, b_X, 0.0), boundary_check=(0, 1))
    b_Xop = _op(b_X, IS_BF16)

    # ---- pass 2 over K: w, qg, kg (gate cumsum recomputed: same ops, same bits) --------------------------------
    for i_k in range(NK):
        b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE,
                           HAS_A_LOG, HAS_DT_BIAS)
        b_Gl = tl.sum(tl.where((o_t == n_valid - 1)[:, None], b_G, 0.0), 0)
        p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32) * (b_rq * scale)[:, None]
        b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32) * b_rk[:, None]
        b_eG = tl.exp2(b_G)
        b_w = tl.dot(b_Xop, _op(b_k * b_beta[:, None] * b_eG, IS_BF16), input_precision=PREC)
        b_kg = tl.where(m_t[:, None], b_k * tl.exp2(b_Gl[None, :] - b_G), 0.0)
        p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        tl.store(p_w, b_w.to(p_w.dtype.element_ty), boundary_check=(0, 1))
        tl.store(p_qg, (b_q * b_eG).to(p_qg.dtype.element_ty), boundary_check=(0, 1))
        tl.store(p_kg, b_kg.to(p_kg.dtype.element_ty), boundary_check=(0, 1))
        if STORE_AUX:
            p_G = tl.make_block_ptr(gcum + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK),
                                    (1, 0))
            tl.store(p_G, b_G, boundary_check=(0, 1))
    for i_v in range(tl.cdiv(V, BV)):
        p_v = tl.make_block_ptr(v + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        b_v = tl.load(p_v, boundary_check=(0, 1)).to(tl.float32) * b_beta[:, None]
        b_u = tl.dot(b_Xop, _op(b_v, IS_BF16), input_precision=PREC)
        tl.store(p_u, b_u.to(p_u.dtype.element_ty), boundary_check=(0, 1))


@triton.jit
def _mm(a, b, IS_BF16: tl.constexpr, PREC: tl.constexpr):
    """a @ b with both operands in the product dtype of `_op`, fp32 accumulation."""
    return tl.dot(_op(a, IS_BF16), _op(b, IS_BF16), input_precision=PREC)


@triton.jit
def _kda_intra_bwd_kernel(
    q, k, v, g, beta, A_log, dt_bias,
    gcum, rstd_q, rstd_k, beta_act, Akk, h, dh, v_new, dv_new, do,
    dq, dk, dv, dg, dbeta, dA_log_rows,
    cu_seqlens, chunk_indices, scale, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr, V_FIRST: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr,
):
    """Chunk-local backward, one program per (chunk, v-head); the whole K row sits in one BK >= K tile.

    Inputs: q, k [TT, H, K]; v, do [TT, HV, V]; g [TT, HV, K]; beta [TT, HV] (raw, as the caller passed them);
    the forward's gcum [TT, HV, K] fp32 (log2 units), rstd_q/rstd_k/beta_act [TT, HV] fp32, Akk [TT, HV, BT] fp32,
    h [NT, HV, K, V] fp32 (state at each chunk start; [NT, HV, V, K] if V_FIRST), v_new [TT, HV, V]; from the
    reverse state pass dh [NT, HV, K, V] fp32 (gradient of the state after each chunk) and dv_new [TT, HV, V] fp32.
    Writes dq, dk [TT, HV, K] fp32 (per v-head partials, summed over the GVA group by the caller), dv [TT, HV, V]
    in v's dtype, dg [TT, HV, K] fp32 (w.r.t. the raw gate input), dbeta [TT, HV] fp32 (w.r.t. the raw beta),
    dA_log_rows [TT, HV] fp32 (per-token partials of dA_log, only with HAS_A_LOG).

    With S = h[c], dS = dh[c], natural-log cumsum G (e^G = 2^gcum), qn = scale rstd_q q, kn = rstd_k k:
        dqg = do S^T, dAqk = tril(do v_new^T), dkg = v_new dS^T, dw = -dv_new S^T, du = dv_new
    then back through u = Akk (beta v), w = Akk (beta kn e^G), Akk = (I + L)^-1, Aqk, L, qg = qn e^G,
    kg = kn e^(G_last - G), the chunk cumsum, the gate activation, the l2 norms and the beta sigmoid.
    """
    i_t, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos, T, i_c = _chunk_coords(cu_seqlens, chunk_indices, i_t)
    t0 = i_c * BT
    n_valid = tl.minimum(T - t0, BT)
    o_t = tl.arange(0, BT)
    m_t = o_t < n_valid
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    m_tk = m_t[:, None] & m_k[None, :]
    p_row_hv = (bos + t0 + o_t).to(tl.int64) * HV + i_hv

    p_q = tl.make_block_ptr(q + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_k = tl.make_block_ptr(k + (bos * H + i_h) * K, (T, K), (H * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_G = tl.make_block_ptr(gcum + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_A = tl.make_block_ptr(Akk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
    b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
    b_k = tl.load(p_k, boundary_check=(0, 1)).to(tl.float32)
    b_G = tl.load(p_G, boundary_check=(0, 1))
    b_A = tl.load(p_A, boundary_check=(0, 1))
    b_Gl = tl.load(gcum + ((bos + t0 + n_valid - 1) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
    b_rq = tl.load(rstd_q + p_row_hv, mask=m_t, other=0.0)
    b_rk = tl.load(rstd_k + p_row_hv, mask=m_t, other=0.0)
    b_b = tl.load(beta_act + p_row_hv, mask=m_t, other=0.0)
    b_qn = b_q * (b_rq * scale)[:, None]
    b_kn = b_k * b_rk[:, None]
    b_eG = tl.exp2(b_G)
    b_eGl = tl.where(m_t[:, None], tl.exp2(b_Gl[None, :] - b_G), 0.0)
    b_qg = b_qn * b_eG
    b_kg = b_kn * b_eGl
    b_kbn = b_kn * b_b[:, None]
    b_kb = b_kbn * b_eG

    # ---- gradients of the state-stage inputs, over V blocks ----------------------------------------------------
    b_dqg = tl.zeros((BT, BK), dtype=tl.float32)
    b_dkg = tl.zeros((BT, BK), dtype=tl.float32)
    b_dw = tl.zeros((BT, BK), dtype=tl.float32)
    b_dAqk = tl.zeros((BT, BT), dtype=tl.float32)
    b_dA = tl.zeros((BT, BT), dtype=tl.float32)
    b_db = tl.zeros((BT,), dtype=tl.float32)
    b_dGl = tl.zeros((BK,), dtype=tl.float32)
    p_state = (i_t * HV + i_hv).to(tl.int64) * K * V
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        if V_FIRST:
            off_h = o_v[None, :] * K + o_k[:, None]
        else:
            off_h = o_k[:, None] * V + o_v[None, :]
        b_S = tl.load(h + p_state + off_h, mask=m_kv, other=0.0)
        b_dS = tl.load(dh + p_state + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
        p_do = tl.make_block_ptr(do + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_dvn = tl.make_block_ptr(dv_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                  (1, 0))
        p_v = tl.make_block_ptr(v + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_dv = tl.make_block_ptr(dv + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        b_do = tl.load(p_do, boundary_check=(0, 1)).to(tl.float32)
        b_vn = tl.load(p_vn, boundary_check=(0, 1)).to(tl.float32)
        b_dvn = tl.load(p_dvn, boundary_check=(0, 1))
        b_v = tl.load(p_v, boundary_check=(0, 1)).to(tl.float32)
        b_dqg += _mm(b_do, tl.trans(b_S), IS_BF16, PREC)
        b_dAqk += _mm(b_do, tl.trans(b_vn), IS_BF16, PREC)
        b_dkg += _mm(b_vn, tl.trans(b_dS), IS_BF16, PREC)
        b_dw -= _mm(b_dvn, tl.trans(b_S), IS_BF16, PREC)
        b_dGl += tl.sum(b_S * b_dS, axis=1)
        b_dA += _mm(b_dvn, tl.trans(b_v * b_b[:, None]), IS_BF16, PREC)
        b_dvb = _mm(tl.trans(b_A), b_dvn, IS_BF16, PREC)
        tl.store(p_dv, (b_dvb * b_b[:, None]).to(p_dv.dtype.element_ty), boundary_check=(0, 1))
        b_db += tl.sum(b_dvb * b_v, axis=1)

    # ---- w = Akk (beta kn e^G), Akk = (I + L)^-1, qg, kg, the state decay --------------------------------------
    b_dA += _mm(b_dw, tl.trans(b_kb), IS_BF16, PREC)
    b_X = _mm(tl.trans(b_A), b_dw, IS_BF16, PREC)
    b_db += tl.sum(b_X * b_kn * b_eG, axis=1)
    b_dkn = b_X * b_b[:, None] * b_eG + b_dkg * b_eGl
    b_dqn = b_dqg * b_eG
    b_dG = b_X * b_kb + b_dqg * b_qg - b_dkg * b_kg
    b_dGl = b_dGl * tl.exp2(b_Gl) + tl.sum(b_dkg * b_kg, axis=0)
    m_tt = m_t[:, None] & m_t[None, :]
    b_dL = -_mm(_mm(tl.trans(b_A), b_dA, IS_BF16, PREC), tl.trans(b_A), IS_BF16, PREC)
    b_dL = tl.where(m_tt & (o_t[None, :] < o_t[:, None]), b_dL, 0.0)
    b_dAqk = tl.where(m_tt & (o_t[None, :] <= o_t[:, None]), b_dAqk, 0.0)

    # ---- Aqk and L: R_i = sum_j D_ij kn_j e^(G_i - G_j), C_j = sum_i D_ij x_i e^(G_i - G_j), exact per column ----
    b_Rq = tl.zeros((BT, BK), dtype=tl.float32)
    b_RL = tl.zeros((BT, BK), dtype=tl.float32)
    b_C = tl.zeros((BT, BK), dtype=tl.float32)
    for j in range(BT):
        sel_r = (o_t == j)[:, None]
        sel_c = (o_t == j)[None, :]
        b_Gj = tl.sum(tl.where(sel_r, b_G, 0.0), axis=0)
        b_knj = tl.sum(tl.where(sel_r, b_kn, 0.0), axis=0)
        b_E = tl.where((o_t >= j)[:, None], tl.exp2(tl.minimum(b_G - b_Gj[None, :], 0.0)), 0.0)
        b_dq_j = tl.sum(tl.where(sel_c, b_dAqk, 0.0), axis=1)
        b_dl_j = tl.sum(tl.where(sel_c, b_dL, 0.0), axis=1)
        b_Rq += b_dq_j[:, None] * b_knj[None, :] * b_E
        b_RL += b_dl_j[:, None] * b_knj[None, :] * b_E
        b_cj = tl.sum((b_dq_j[:, None] * b_qn + b_dl_j[:, None] * b_kbn) * b_E, axis=0)
        b_C += tl.where(sel_r, b_cj[None, :], 0.0)
    b_dqn += b_Rq
    b_dkn += b_RL * b_b[:, None] + b_C
    b_db += tl.sum(b_kn * b_RL, axis=1)
    b_dG += b_qn * b_Rq + b_kbn * b_RL - b_kn * b_C
    b_dG += tl.where((o_t == n_valid - 1)[:, None], b_dGl[None, :], 0.0)

    # ---- the chunk cumsum (reverse cumsum of dG) and the gate activation ----------------------------------------
    b_dg = tl.cumsum(tl.where(m_tk, b_dG, 0.0), axis=0, reverse=True)
    if GATE > 0:
        p_g = tl.make_block_ptr(g + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
        b_x = tl.load(p_g, boundary_check=(0, 1)).to(tl.float32)
        if HAS_DT_BIAS:
            b_x += tl.load(dt_bias + i_hv * K + o_k, mask=m_k, other=0.0).to(tl.float32)[None, :]
        if HAS_A_LOG:
            a = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
        else:
            a = 1.0
        b_dg, b_da = kda_gate_act_bwd(b_x, a, lower_bound, b_dg, GATE)
        if HAS_A_LOG:
            tl.store(dA_log_rows + p_row_hv, tl.sum(tl.where(m_tk, b_da, 0.0), axis=1) * a, mask=m_t)
    p_dg = tl.make_block_ptr(dg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    tl.store(p_dg, b_dg, boundary_check=(0, 1))

    # ---- l2 norms (y = x r, r = (|x|^2 + eps)^-1/2: dx = r (dy - y (y . dy))) and beta --------------------------
    b_dq = b_dqn * scale
    b_dk = b_dkn
    if USE_L2NORM:
        b_qh = b_q * b_rq[:, None]
        b_kh = b_kn
        b_dq = b_rq[:, None] * (b_dq - b_qh * tl.sum(b_qh * b_dq, axis=1)[:, None])
        b_dk = b_rk[:, None] * (b_dk - b_kh * tl.sum(b_kh * b_dk, axis=1)[:, None])
    p_dq = tl.make_block_ptr(dq + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    p_dk = tl.make_block_ptr(dk + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
    tl.store(p_dq, b_dq, boundary_check=(0, 1))
    tl.store(p_dk, b_dk, boundary_check=(0, 1))
    if BETA_SIGMOID:
        b_db = b_db * b_b * (1.0 - b_b / BETA_SCALE)
    tl.store(dbeta + p_row_hv, b_db, mask=m_t)


class IntraBwdOut(NamedTuple):
    dq: torch.Tensor            # [TT, HV, K] fp32, per v-head partials
    dk: torch.Tensor            # [TT, HV, K] fp32, per v-head partials
    dv: torch.Tensor            # [TT, HV, V] in v's dtype
    dg: torch.Tensor            # [TT, HV, K] fp32, w.r.t. the raw gate input
    dbeta: torch.Tensor         # [TT, HV] fp32, w.r.t. the raw beta
    dA_log_rows: torch.Tensor   # [TT, HV] fp32 per-token partials of dA_log (unwritten without A_log)


def intra_bwd(q, k, v, g, beta, A_log, dt_bias, gcum, rstd_q, rstd_k, beta_act, Akk, h, dh, v_new, dv_new, do,
              scale: float, plan, BT: int, *, use_qk_l2norm_in_kernel: bool, gate: int, lower_bound: float | None,
              use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, state_v_first: bool,
              prec: str) -> IntraBwdOut:
    """Launch `_kda_intra_bwd_kernel` on the (NT, HV) grid; shapes as in its docstring (all contiguous, flattened
    to TT tokens); A_log [HV] and dt_bias [HV * K] or None; gate: the GATE constexpr; plan: ChunkPlan."""
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    dev = q.device
    cfg = intra_config(arch_of(dev), K, V)
    f32 = dict(device=dev, dtype=torch.float32)
    out = IntraBwdOut(
        dq=torch.empty(TT, HV, K, **f32), dk=torch.empty(TT, HV, K, **f32), dv=torch.empty_like(v),
        dg=torch.empty(TT, HV, K, **f32), dbeta=torch.empty(TT, HV, **f32), dA_log_rows=torch.empty(TT, HV, **f32),
    )
    _kda_intra_bwd_kernel[(plan.NT, HV)](
        q, k, v, g, beta, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q,
        gcum, rstd_q, rstd_k, beta_act, Akk, h, dh, v_new, dv_new, do, *out,
        plan.cu_seqlens, plan.chunk_indices, scale, lower_bound if lower_bound is not None else 0.0,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=_kpad(K), BV=cfg.BV,
        USE_L2NORM=use_qk_l2norm_in_kernel, GATE=gate, HAS_A_LOG=gate > 0 and A_log is not None,
        HAS_DT_BIAS=gate > 0 and dt_bias is not None, BETA_SIGMOID=use_beta_sigmoid_in_kernel,
        BETA_SCALE=2.0 if allow_neg_eigval else 1.0, V_FIRST=state_v_first, IS_BF16=q.dtype == torch.bfloat16,
        PREC=prec, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
