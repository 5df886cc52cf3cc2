"""The `fused_recurrent_kda` kernels (KDA token by token, for decode and serving) and their launchers; the public
function, its autograd Function and the plans it keeps per call signature are decode.py's.

Forward: one program per (sequence, v-head, V block of BV columns) holds a [K, BV] fp32 block of the state in
registers and walks its sequence's tokens, reading and writing each state element once per call:
    S <- diag(exp(gate_t)) S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = S^T (scale q_t)

State pools (serving): ``initial_state`` is a pool ``[num_slots, HV, K, V]`` and ``ssm_state_indices`` names the
slots. Per sequence (``[N]``): sequence n reads slot idx[n] and, with ``inplace_final_state``, writes its final state
there. Per token (``[N, S]``, speculative decoding as vLLM drives fla): sequence n reads slot
``idx[n, num_accepted_tokens[n] - 1]`` (column 0 without num_accepted_tokens) and, with ``inplace_final_state``,
writes the state after its token t to slot ``idx[n, t]``. A negative read index is padding: that sequence starts
from a zero state and writes no slot (a negative write entry skips that token's write). Indices the host did not
check (``check_indices=False``, CUDA-graph capture) that fall outside the pool are treated as padding, so no launch
touches memory outside the pool.

Backward (reverse time): one program per (sequence, v-head, V block) replays the forward from the initial state,
storing the state every C tokens, then walks the tokens backwards; token t's state S_{t-1} is replayed from the
checkpoint before it (at most C - 1 steps), and with dS the gradient of the state after token t:
    dS += q_t do_t^T;  du = dS^T k_t;  dv_t = beta_t du;  dbeta_t = du . (v_t - S'^T k_t);  dp = -beta_t du
    dk_t = dS u_t + S' dp;  dS' = dS + k_t dp^T;  dgate_t = rowsum(dS' * S');  dS <- diag(exp(gate_t)) dS'
(S' = diag(exp(gate_t)) S_{t-1}). The k, q, gate and beta gradients are partial sums over the V blocks, written per
block and added in a fixed order by a second kernel that also applies the l2norm, gate and sigmoid derivatives and
sums the GVA group: deterministic, no atomics.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.compiler import CompiledKernel

from triton_kda._jit import _state_offsets
from triton_kda._validate_recurrent import RecurrentProblem
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.configs import _kpad, arch_of, cdiv, recurrent_bwd_config, recurrent_fwd_config, sm_count
from triton_kda.gate import _gate_input_of, kda_gate_act, kda_gate_act_bwd


@triton.jit
def _seq_span(cu_seqlens, i_n, T, TT, IS_VARLEN: tl.constexpr):
    """Start (int64) and token count (int32) of sequence i_n; varlen boundaries are clamped into [0, TT], so
    unchecked ones cannot address tokens outside the batch."""
    if IS_VARLEN:
        eos = tl.minimum(tl.maximum(tl.load(cu_seqlens + i_n + 1).to(tl.int64), 0), TT)
        bos = tl.minimum(tl.maximum(tl.load(cu_seqlens + i_n).to(tl.int64), 0), eos)
        L = eos - bos
    else:
        bos = i_n.to(tl.int64) * T
        L = bos * 0 + T
    return bos, L.to(tl.int32)


@triton.jit
def _read_slot(indices, num_accepted, i_n, s_in, s_it, S_cols, num_slots, IDX_MODE: tl.constexpr,
               HAS_ACCEPTED: tl.constexpr):
    """(slot, live): the state slot sequence i_n starts from (int64) and whether it is one (IDX_MODE 0: slot i_n of
    an [N, ...] state; 1: indices[i_n]; 2: indices[i_n, num_accepted[i_n] - 1], column 0 without num_accepted)."""
    if IDX_MODE == 0:
        slot = i_n.to(tl.int64)
    elif HAS_ACCEPTED:
        col = tl.load(num_accepted + i_n).to(tl.int64) - 1
        ok = (col >= 0) & (col < S_cols)
        slot = tl.load(indices + i_n.to(tl.int64) * s_in + col * s_it, mask=ok, other=-1).to(tl.int64)
    else:
        slot = tl.load(indices + i_n.to(tl.int64) * s_in).to(tl.int64)
    return slot, (slot >= 0) & (slot < num_slots)


@triton.jit
def _program(cu_seqlens, indices, num_accepted, T, TT, s_in, s_it, S_cols, num_slots, H: tl.constexpr,
             HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr,
             IS_VARLEN: tl.constexpr, IDX_MODE: tl.constexpr, HAS_ACCEPTED: tl.constexpr, V_FIRST: tl.constexpr):
    """Where this program works (one per (V block, v-head, sequence), V block fastest): i_v, i_hv, i_n, i_h (the
    q/k head), the sequence's start and length (`_seq_span`), the K and V offsets of its state block with their
    masks, the block's element offsets inside one [HV, K, V] state ([HV, V, K] if V_FIRST), and the read slot
    (`_read_slot`)."""
    pid = tl.program_id(0)
    i_v, i_hv, i_n = pid % NV, (pid // NV) % HV, pid // (NV * HV)
    bos, L = _seq_span(cu_seqlens, i_n, T, TT, IS_VARLEN)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    off_kv = i_hv * K * V + _state_offsets(o_k, o_v, K, V, V_FIRST)
    slot, live = _read_slot(indices, num_accepted, i_n, s_in, s_it, S_cols, num_slots, IDX_MODE, HAS_ACCEPTED)
    return (i_v, i_hv, i_n, i_hv // (HV // H), bos, L, o_k, o_v, m_k, m_v, m_k[:, None] & m_v[None, :], off_kv,
            slot, live)


@triton.jit
def _token_inputs(q, k, v, g, beta, A_log, dt_bias, tok, i_h, i_hv, o_k, m_k, o_v, m_v, scale, lower_bound,
                  H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                  USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
                  BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr):
    """Activated fp32 inputs of token `tok` for v-head i_hv: scale * q_hat and k_hat [BK] (l2-normalised if
    USE_L2NORM), the decay exp(gate) [BK], v [BV] and beta (scalar)."""
    b_q = tl.load(q + (tok * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + (tok * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_g = tl.load(g + (tok * HV + i_hv) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_v = tl.load(v + (tok * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
    b_b = tl.load(beta + tok * HV + i_hv).to(tl.float32)
    if USE_L2NORM:
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
    if GATE != 0:
        b_x, a = _gate_input_of(b_g, A_log, dt_bias, i_hv, 0, K, BK, HAS_A_LOG, HAS_DT_BIAS)
        b_g = kda_gate_act(b_x, a, lower_bound, GATE)
    if BETA_SIGMOID:
        b_b = tl.sigmoid(b_b) * BETA_SCALE
    return b_q * scale, b_k, tl.exp(b_g), b_v, b_b


@triton.jit
def _step(b_S, b_k, b_a, b_v, b_b):
    """One token of the recurrence on a [BK, BV] state block: decay, delta-rule update."""
    b_S = b_S * b_a[:, None]
    b_u = b_b * (b_v - tl.sum(b_S * b_k[:, None], 0))
    return b_S + b_k[:, None] * b_u[None, :]


@triton.jit
def _kda_recurrent_fwd_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, o, ht, cu_seqlens, indices, num_accepted,
    scale, lower_bound, T, TT, stride_h0, s_in, s_it, S_cols, num_slots,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    NV: tl.constexpr, USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr, HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr, INPLACE: tl.constexpr, IS_VARLEN: tl.constexpr, IDX_MODE: tl.constexpr,
    HAS_ACCEPTED: tl.constexpr, V_FIRST: tl.constexpr,
):
    """q, k: [TT, H, K]; v, o: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV]; h0: the initial states, [N, HV, K, V]
    or a pool [num_slots, HV, K, V] (slot stride stride_h0; [.., V, K] if V_FIRST), written in place if INPLACE;
    ht: [N, HV, K, V] fp32 final states (STORE_HT); indices: [N] or [N, S_cols] (strides s_in, s_it);
    num_accepted: [N]."""
    i_v, i_hv, i_n, i_h, bos, L, o_k, o_v, m_k, m_v, m_kv, off_kv, slot, live = _program(
        cu_seqlens, indices, num_accepted, T, TT, s_in, s_it, S_cols, num_slots, H, HV, K, V, BK, BV, NV, IS_VARLEN,
        IDX_MODE, HAS_ACCEPTED, V_FIRST)
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        b_S += tl.load(h0 + slot * stride_h0 + off_kv, mask=m_kv & live, other=0.0, eviction_policy="evict_first")
    for i_t in range(L):
        tok = bos + i_t
        b_q, b_k, b_a, b_v, b_b = _token_inputs(
            q, k, v, g, beta, A_log, dt_bias, tok, i_h, i_hv, o_k, m_k, o_v, m_v, scale, lower_bound, H, HV, K, V,
            BK, USE_L2NORM, GATE, HAS_A_LOG, HAS_DT_BIAS, BETA_SIGMOID, BETA_SCALE)
        b_S = _step(b_S, b_k, b_a, b_v, b_b)
        b_o = tl.sum(b_S * b_q[:, None], 0)
        tl.store(o + (tok * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
        if INPLACE and IDX_MODE == 2:
            w = tl.load(indices + i_n.to(tl.int64) * s_in + i_t * s_it, mask=i_t < S_cols, other=-1).to(tl.int64)
            tl.store(h0 + w * stride_h0 + off_kv, b_S, mask=m_kv & live & (w >= 0) & (w < num_slots),
                     eviction_policy="evict_first")
    if STORE_HT:
        tl.store(ht + i_n.to(tl.int64) * HV * K * V + off_kv, b_S, mask=m_kv)
    if INPLACE and IDX_MODE != 2:
        tl.store(h0 + slot * stride_h0 + off_kv, b_S, mask=m_kv & live & (L > 0), eviction_policy="evict_first")


@triton.jit
def _kda_recurrent_bwd_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, do, dht, dh0, ckpt, ck_offsets, dv, dq_p, dk_p, dg_p, db_p,
    cu_seqlens, indices, num_accepted,
    scale, lower_bound, T, TT, stride_h0, stride_dh0, s_in, s_it, S_cols, num_slots,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    NV: tl.constexpr, C: tl.constexpr, USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr, HAS_H0: tl.constexpr,
    HAS_DHT: tl.constexpr, STORE_DH0: tl.constexpr, IS_VARLEN: tl.constexpr, IDX_MODE: tl.constexpr,
    HAS_ACCEPTED: tl.constexpr, V_FIRST: tl.constexpr,
):
    """Reverse pass of one (V block, v-head, sequence). Inputs as in the forward kernel, do: [TT, HV, V]; dht:
    [N, HV, K, V] fp32 (V_FIRST layout rule); ckpt: [NC, HV, K, V] fp32 workspace (one state per C tokens,
    sequence n's first at ck_offsets[n]). Writes dv [TT, HV, V] (v's dtype); fp32 partial sums over this V block of
    the gradients of scale * q_hat and k_hat and of the activated gate, dq_p, dk_p, dg_p [NV, TT, HV, K], and of the
    activated beta, db_p [NV, TT, HV]; dh0 (STORE_DH0): the gradient of the starting state, at dh0[n] or, for a
    pool, at the slot read (slot stride stride_dh0)."""
    i_v, i_hv, i_n, i_h, bos, L, o_k, o_v, m_k, m_v, m_kv, off_kv, slot, live = _program(
        cu_seqlens, indices, num_accepted, T, TT, s_in, s_it, S_cols, num_slots, H, HV, K, V, BK, BV, NV, IS_VARLEN,
        IDX_MODE, HAS_ACCEPTED, V_FIRST)
    off_ck = i_hv * K * V + o_k[:, None] * V + o_v[None, :]
    ck_base = tl.load(ck_offsets + i_n).to(tl.int64)
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        b_S += tl.load(h0 + slot * stride_h0 + off_kv, mask=m_kv & live, other=0.0)
    for i_t in range(L):
        if i_t % C == 0:
            tl.store(ckpt + (ck_base + i_t // C) * HV * K * V + off_ck, b_S, mask=m_kv)
        b_q, b_k, b_a, b_v, b_b = _token_inputs(
            q, k, v, g, beta, A_log, dt_bias, bos + i_t, i_h, i_hv, o_k, m_k, o_v, m_v, scale, lower_bound, H, HV, K,
            V, BK, USE_L2NORM, GATE, HAS_A_LOG, HAS_DT_BIAS, BETA_SIGMOID, BETA_SCALE)
        b_S = _step(b_S, b_k, b_a, b_v, b_b)
    tl.debug_barrier()  # the checkpoints were stored by other threads of the program

    b_dS = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_DHT:
        b_dS += tl.load(dht + i_n.to(tl.int64) * HV * K * V + off_kv, mask=m_kv, other=0.0)
    NC = tl.cdiv(L, C)
    for i_r in range(NC):
        i_c = NC - 1 - i_r
        t0 = i_c * C
        n_c = tl.minimum(L - t0, C)
        for j_r in range(n_c):
            j = n_c - 1 - j_r
            b_S = tl.load(ckpt + (ck_base + i_c) * HV * K * V + off_ck, mask=m_kv, other=0.0)
            for i in range(j):  # replay from the checkpoint to the state before token t0 + j
                b_q, b_k, b_a, b_v, b_b = _token_inputs(
                    q, k, v, g, beta, A_log, dt_bias, bos + t0 + i, i_h, i_hv, o_k, m_k, o_v, m_v, scale, lower_bound,
                    H, HV, K, V, BK, USE_L2NORM, GATE, HAS_A_LOG, HAS_DT_BIAS, BETA_SIGMOID, BETA_SCALE)
                b_S = _step(b_S, b_k, b_a, b_v, b_b)
            tok = bos + t0 + j
            b_q, b_k, b_a, b_v, b_b = _token_inputs(
                q, k, v, g, beta, A_log, dt_bias, tok, i_h, i_hv, o_k, m_k, o_v, m_v, scale, lower_bound, H, HV, K, V,
                BK, USE_L2NORM, GATE, HAS_A_LOG, HAS_DT_BIAS, BETA_SIGMOID, BETA_SCALE)
            b_do = tl.load(do + (tok * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_Sd = b_S * b_a[:, None]
            b_vp = b_v - tl.sum(b_Sd * b_k[:, None], 0)
            b_u = b_b * b_vp
            b_dq = tl.sum((b_Sd + b_k[:, None] * b_u[None, :]) * b_do[None, :], 1)
            b_dS += b_q[:, None] * b_do[None, :]
            b_du = tl.sum(b_dS * b_k[:, None], 0)
            b_dp = -b_b * b_du
            b_dk = tl.sum(b_dS * b_u[None, :], 1) + tl.sum(b_Sd * b_dp[None, :], 1)
            b_dS += b_k[:, None] * b_dp[None, :]
            b_dg = tl.sum(b_dS * b_Sd, 1)
            b_dS = b_dS * b_a[:, None]
            p = (tok + TT * i_v.to(tl.int64)) * HV + i_hv
            tl.store(dq_p + p * K + o_k, b_dq, mask=m_k)
            tl.store(dk_p + p * K + o_k, b_dk, mask=m_k)
            tl.store(dg_p + p * K + o_k, b_dg, mask=m_k)
            tl.store(db_p + p, tl.sum(b_du * b_vp))
            tl.store(dv + (tok * HV + i_hv) * V + o_v, (b_b * b_du).to(dv.dtype.element_ty), mask=m_v)
    if STORE_DH0:
        if IDX_MODE == 0:
            tl.store(dh0 + i_n.to(tl.int64) * HV * K * V + off_kv, b_dS, mask=m_kv)
        else:
            tl.store(dh0 + slot * stride_dh0 + off_kv, b_dS, mask=m_kv & live)


@triton.jit
def _qk_input_grad(x, dy, tok, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr, USE_L2NORM: tl.constexpr):
    """Gradient w.r.t. the raw q or k row (x: [TT, H, K]) from dy, the gradient w.r.t. the normalised row:
    r (dy - (y . dy) y) with y = x r, r = 1 / sqrt(|x|^2 + 1e-6); dy itself without l2norm."""
    if USE_L2NORM:
        b_x = tl.load(x + (tok * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(b_x * b_x) + 1e-6)
        b_y = b_x * r
        dy = r * (dy - tl.sum(b_y * dy) * b_y)
    return dy


@triton.jit
def _kda_recurrent_input_bwd_kernel(
    q, k, g, beta, A_log, dt_bias, dq_p, dk_p, dg_p, db_p, dq, dk, dg, dbeta, dA_p,
    scale, lower_bound, TT,
    H: tl.constexpr, HV: tl.constexpr, G: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, NV: tl.constexpr,
    USE_L2NORM: tl.constexpr, GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    BETA_SIGMOID: tl.constexpr, BETA_SCALE: tl.constexpr,
):
    """Input gradients of one (token, q/k head) from the reverse pass's partial sums, added in a fixed order (V
    blocks, then the G v-heads of the group): dq, dk [TT, H, K] (q's dtype); for each v-head of the group dg
    [TT, HV, K] fp32 (w.r.t. the gate input the caller passed), dbeta [TT, HV] (beta's dtype) and dA_p [TT, HV]
    fp32 (this token's term of dA_log)."""
    tok = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_1 = tl.arange(0, 1)
    b_dq = tl.zeros([BK], dtype=tl.float32)
    b_dk = tl.zeros([BK], dtype=tl.float32)
    for i_g in range(G):
        i_hv = i_h * G + i_g
        b_dg = tl.zeros([BK], dtype=tl.float32)
        b_db = tl.zeros([1], dtype=tl.float32)
        for i_v in range(NV):
            p = (tok + TT * i_v) * HV + i_hv
            b_dq += tl.load(dq_p + p * K + o_k, mask=m_k, other=0.0)
            b_dk += tl.load(dk_p + p * K + o_k, mask=m_k, other=0.0)
            b_dg += tl.load(dg_p + p * K + o_k, mask=m_k, other=0.0)
            b_db += tl.load(db_p + p + o_1)
        if GATE != 0:
            b_x, a = _gate_input_of(tl.load(g + (tok * HV + i_hv) * K + o_k, mask=m_k, other=0.0), A_log, dt_bias,
                                    i_hv, 0, K, BK, HAS_A_LOG, HAS_DT_BIAS)
            b_dg, b_da = kda_gate_act_bwd(b_x, a, lower_bound, b_dg, GATE)
            if HAS_A_LOG:
                tl.store(dA_p + tok * HV + i_hv, tl.sum(tl.where(m_k, b_da, 0.0)) * a)
        tl.store(dg + (tok * HV + i_hv) * K + o_k, b_dg, mask=m_k)
        if BETA_SIGMOID:
            b_s = tl.sigmoid(tl.load(beta + tok * HV + i_hv + o_1).to(tl.float32))
            b_db = b_db * BETA_SCALE * b_s * (1.0 - b_s)
        tl.store(dbeta + tok * HV + i_hv + o_1, b_db.to(dbeta.dtype.element_ty))
    b_dq = _qk_input_grad(q, b_dq * scale, tok, i_h, o_k, m_k, H, K, USE_L2NORM)
    b_dk = _qk_input_grad(k, b_dk, tok, i_h, o_k, m_k, H, K, USE_L2NORM)
    tl.store(dq + (tok * H + i_h) * K + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k)
    tl.store(dk + (tok * H + i_h) * K + o_k, b_dk.to(dk.dtype.element_ty), mask=m_k)


def _kernel_flags(q, p: RecurrentProblem, flags: dict) -> dict:
    """The constexprs shared by the three kernels."""
    gate = flags["gate"]
    return dict(H=p.H, HV=p.HV, K=p.K, USE_L2NORM=flags["use_qk_l2norm_in_kernel"], GATE=gate,
                HAS_A_LOG=gate > 0 and p.A_log is not None, HAS_DT_BIAS=gate > 0 and p.dt_bias is not None,
                BETA_SIGMOID=flags["use_beta_sigmoid_in_kernel"],
                BETA_SCALE=2.0 if flags["allow_neg_eigval"] else 1.0, BK=_kpad(p.K, arch_of(q.device)))


def _index_args(indices: torch.Tensor | None) -> tuple[int, int, int, int]:
    """(IDX_MODE, s_in, s_it, S_cols) of ssm_state_indices (None, [N] or [N, S])."""
    if indices is None:
        return 0, 0, 0, 1
    if indices.ndim == 1:
        return 1, indices.stride(0), 0, 1
    return 2, indices.stride(0), indices.stride(1), indices.shape[1]


class _FwdPlan:
    """What a forward launch needs that the call's signature fixes: the final states' shape, the grid, the kernel's
    scalar and constexpr arguments (`recurrent_fwd_config`'s configuration), and, for a plan kept per signature
    (`runners` not None), the compiled kernel of its first launch on each device with every pointer 16-byte
    aligned (Triton specialises on that): later launches like it go to that kernel directly, past Triton's per-call
    argument binding. The interpreter compiles nothing, so there every launch goes through Triton."""

    __slots__ = ("T", "N", "device", "o_dtype", "ht_shape", "grid", "scalars", "constexprs", "num_warps",
                 "runners", "tail")

    def __init__(self, q, h0, indices, num_accepted, cu_seqlens, p: RecurrentProblem, flags: dict, *,
                 inplace: bool, output_final_state: bool, keep: bool):
        dev = q.device
        cfg = recurrent_fwd_config(arch_of(dev), p.K, p.V, p.N * p.HV, sm_count(dev))
        NV = cdiv(p.V, cfg.BV)
        idx_mode, s_in, s_it, S_cols = _index_args(indices)
        self.T, self.N, self.device, self.o_dtype = p.T, p.N, dev, q.dtype
        self.ht_shape = None
        if output_final_state and not inplace:
            self.ht_shape = (p.N, p.HV, p.V, p.K) if p.state_v_first else (p.N, p.HV, p.K, p.V)
        self.grid = (NV * p.HV * p.N, 1, 1)  # three dims: a CompiledKernel runner reads grid[0..2]
        self.scalars = (p.scale, flags["lower_bound"], p.T, p.B * p.T, h0.stride(0) if h0 is not None else 0, s_in,
                        s_it, S_cols, p.num_slots)
        self.constexprs = dict(
            V=p.V, BV=cfg.BV, NV=NV, HAS_H0=h0 is not None, STORE_HT=self.ht_shape is not None, INPLACE=inplace,
            IS_VARLEN=cu_seqlens is not None, IDX_MODE=idx_mode, HAS_ACCEPTED=num_accepted is not None,
            V_FIRST=p.state_v_first, **_kernel_flags(q, p, flags))
        self.num_warps = cfg.num_warps
        self.runners: dict | None = {} if keep else None  # current device -> launcher of the compiled kernel
        self.tail = ()  # the scalar and constexpr arguments in the kernel's parameter order


def _device_stream() -> tuple[int, int]:
    """(current device index, handle of its current stream): where Triton launches."""
    active = triton.runtime.driver.active
    dev = active.get_current_device()
    return dev, active.get_current_stream(dev)


def _launch_fwd(plan: _FwdPlan, q, k, v, g, beta, A_log, dt_bias, h0, indices, num_accepted, cu_seqlens,
                out) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch `_kda_recurrent_fwd_kernel` for `plan`. q, k: [B, T, H, K]; v: [B, T, HV, V]; g: [B, T, HV, K];
    beta: [B, T, HV]; A_log, dt_bias: None or HV and HV * K elements (all contiguous); h0: None, [N, HV, K, V] or a
    pool (last three dims contiguous); indices, num_accepted, cu_seqlens: as the public function takes them.
    Returns (o [B, T, HV, V] in q's dtype (`out` when given), final states [N, HV, K, V] fp32 or None)."""
    # empty_like(v): the shape, device and contiguous layout of torch.empty(v.shape, ...) at half its host cost
    o = out if out is not None else torch.empty_like(v, dtype=plan.o_dtype, memory_format=torch.contiguous_format)
    ht = torch.empty(plan.ht_shape, dtype=torch.float32, device=plan.device) if plan.ht_shape is not None else None
    ptrs = (q, k, v, g, beta, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q,
            h0 if h0 is not None else o, o, ht if ht is not None else o, cu_seqlens if cu_seqlens is not None else q,
            indices if indices is not None else q, num_accepted if num_accepted is not None else q)
    aligned = False  # every pointer 16-byte aligned: the case a kept compiled kernel serves
    if plan.runners is not None:
        addrs = [t.data_ptr() for t in ptrs]
        bits = 0
        for a in addrs:
            bits |= a
        aligned = not bits & 15
        if aligned and plan.runners:
            dev, stream = _device_stream()
            runner = plan.runners.get(dev)
            if runner is not None:
                runner(*addrs, *plan.tail, stream=stream)
                return o, ht
    kernel = _kda_recurrent_fwd_kernel
    compiled = kernel[plan.grid](*ptrs, *plan.scalars, **plan.constexprs, num_warps=plan.num_warps, num_stages=1)
    if aligned and isinstance(compiled, CompiledKernel):
        names = kernel.arg_names[len(ptrs) + len(plan.scalars):]
        plan.tail = plan.scalars + tuple(plan.constexprs[n] for n in names)
        plan.runners[_device_stream()[0]] = compiled[plan.grid]
    return o, ht


def recurrent_fwd(q, k, v, g, beta, h0, indices, num_accepted, cu_seqlens, p: RecurrentProblem, flags: dict, *,
                  inplace: bool, output_final_state: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`_launch_fwd` with a plan for this call alone (the autograd path); p.A_log / p.dt_bias: the gate
    parameters, flat."""
    plan = _FwdPlan(q, h0, indices, num_accepted, cu_seqlens, p, flags, inplace=inplace,
                    output_final_state=output_final_state, keep=False)
    return _launch_fwd(plan, q, k, v, g, beta, p.A_log, p.dt_bias, h0, indices, num_accepted, cu_seqlens, None)


def recurrent_bwd(q, k, v, g, beta, h0, indices, num_accepted, cu_seqlens, do, dht, p: RecurrentProblem,
                  flags: dict, *, want_dh0: bool):
    """Gradients of `recurrent_fwd` (not in place) for the upstream do [B, T, HV, V] and dht (None or the final
    states' gradient). Returns (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0): dq..dbeta shaped and typed as their
    inputs; dA_log [HV] and ddt_bias [HV, K] fp32 (None without them); dh0 None unless `want_dh0`: [N, ...], or
    pool-shaped and zero outside the slots read."""
    dev = q.device
    arch = arch_of(dev)
    cfg = recurrent_bwd_config(arch, p.K, p.V)
    NV = cdiv(p.V, cfg.BV)
    TT, HV, K, V = p.B * p.T, p.HV, p.K, p.V
    plan = plan_chunks(p.B, p.T, cfg.C, dev, p.seqlens_cpu)
    ckpt = torch.empty(max(plan.NT, 1), HV, K, V, dtype=torch.float32, device=dev)
    dv = torch.empty_like(v)
    dq_p, dk_p, dg_p = (torch.empty(NV, TT, HV, K, dtype=torch.float32, device=dev) for _ in range(3))
    db_p = torch.empty(NV, TT, HV, dtype=torch.float32, device=dev)
    dh0 = None
    if want_dh0:
        dh0 = torch.zeros_like(h0) if indices is not None else torch.empty_like(h0)
    idx_mode, s_in, s_it, S_cols = _index_args(indices)
    kf = _kernel_flags(q, p, flags)
    _kda_recurrent_bwd_kernel[(NV * HV * p.N,)](
        q, k, v, g, beta, p.A_log if p.A_log is not None else q, p.dt_bias if p.dt_bias is not None else q,
        h0 if h0 is not None else do, do, dht if dht is not None else do, dh0 if dh0 is not None else do, ckpt,
        plan.chunk_offsets, dv, dq_p, dk_p, dg_p, db_p, plan.cu_seqlens,
        indices if indices is not None else q, num_accepted if num_accepted is not None else q,
        p.scale, flags["lower_bound"], p.T, TT, h0.stride(0) if h0 is not None else 0,
        dh0.stride(0) if dh0 is not None else 0, s_in, s_it, S_cols, p.num_slots,
        V=V, BV=cfg.BV, NV=NV, C=cfg.C, HAS_H0=h0 is not None, HAS_DHT=dht is not None, STORE_DH0=want_dh0,
        IS_VARLEN=True, IDX_MODE=idx_mode, HAS_ACCEPTED=num_accepted is not None, V_FIRST=p.state_v_first, **kf,
        num_warps=cfg.num_warps, num_stages=1,
    )
    dq, dk = torch.empty_like(q), torch.empty_like(k)
    dg32 = torch.empty(TT, HV, K, dtype=torch.float32, device=dev)
    dbeta = torch.empty_like(beta)
    dA_p = torch.empty(TT, HV, dtype=torch.float32, device=dev) if kf["HAS_A_LOG"] else None
    _kda_recurrent_input_bwd_kernel[(TT, p.H)](
        q, k, g, beta, p.A_log if p.A_log is not None else q, p.dt_bias if p.dt_bias is not None else q,
        dq_p, dk_p, dg_p, db_p, dq, dk, dg32, dbeta, dA_p if dA_p is not None else dg32,
        p.scale, flags["lower_bound"], TT, G=HV // p.H, NV=NV, **kf, num_warps=cfg.input_warps,
    )
    dA_log = dA_p.sum(0) if dA_p is not None else None
    ddt_bias = dg32.sum(0) if kf["HAS_DT_BIAS"] else None
    return dq, dk, dv, dg32.to(g.dtype).view_as(g), dbeta, dA_log, ddt_bias, dh0
