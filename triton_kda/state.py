"""State-passing + output stage (forward): one program per (V block, sequence, v-head) walks its chunks in order.

Per chunk, with S the state at the chunk start ([K, BV], fp32, kept on chip):
    v_new = u - w S
    o     = qg S + Aqk v_new
    S     <- 2^(G_last) * S + kg^T v_new
"""
import triton
import triton.language as tl

from triton_kda.intra import _finite_or_zero, _op


@triton.jit
def _kda_state_fwd_kernel(
    qg, kg, w, u, Aqk, gl, h0, o, ht, h, v_new,
    cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, STORE_H: tl.constexpr, STORE_VNEW: tl.constexpr,
    V_FIRST: tl.constexpr, IS_BF16: tl.constexpr, PREC: tl.constexpr,
):
    """qg, kg, w: [TT, HV, K]; u, o, v_new: [TT, HV, V]; Aqk: [TT, HV, BT]; gl: [NT, HV, K] fp32 (log2 units);
    h0, ht: [N, HV, K, V] fp32 ([N, HV, V, K] if V_FIRST); h: [NT, HV, K, V] (same layout rule as the states)."""
    i_v, i_n, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    T = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos).to(tl.int32)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    if V_FIRST:
        off_kv = o_v[None, :] * K + o_k[:, None]
    else:
        off_kv = o_k[:, None] * V + o_v[None, :]
    b_S = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        b_S += tl.load(h0 + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, mask=m_kv, other=0.0)
    c_base = tl.load(chunk_offsets + i_n).to(tl.int64)
    for i_c in range(tl.cdiv(T, BT)):
        t0 = i_c * BT
        if STORE_H:
            tl.store(h + ((c_base + i_c) * HV + i_hv) * K * V + off_kv, b_S.to(h.dtype.element_ty), mask=m_kv)
        p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
        p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
        p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
        p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
        b_Sop = _op(b_S, IS_BF16)
        b_vn = tl.load(p_u, boundary_check=(0, 1)).to(tl.float32)
        b_vn -= tl.dot(_op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16), b_Sop, input_precision=PREC)
        b_vnop = _op(_finite_or_zero(b_vn), IS_BF16)
        b_o = tl.dot(_op(tl.load(p_qg, boundary_check=(0, 1)), IS_BF16), b_Sop, input_precision=PREC)
        b_o += tl.dot(_op(tl.load(p_A, boundary_check=(0, 1)), IS_BF16), b_vnop, input_precision=PREC)
        p_o = tl.make_block_ptr(o + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), boundary_check=(0, 1))
        if STORE_VNEW:
            p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                     (1, 0))
            tl.store(p_vn, b_vn.to(p_vn.dtype.element_ty), boundary_check=(0, 1))
        b_gl = tl.load(gl + ((c_base + i_c) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
        b_S *= tl.exp2(b_gl)[:, None]
        b_S += tl.dot(tl.trans(_op(tl.load(p_kg, boundary_check=(0, 1)), IS_BF16)), b_vnop, input_precision=PREC)
    if STORE_HT:
        tl.store(ht + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, b_S, mask=m_kv)
