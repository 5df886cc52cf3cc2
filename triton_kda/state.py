"""State-passing + output stage (forward): one program per (V block, sequence, v-head) walks its chunks in order.

Per chunk, with S the state at the chunk start ([K, BV], fp32, kept on chip):
    v_new = u - w S
    o     = qg S + Aqk v_new
    S     <- 2^(G_last) * S + kg^T v_new
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from triton_kda._jit import (
    _dot,
    _dot_exact,
    _finite_or_zero,
    _load_pair,
    _op,
    _pair_dot,
    _pair_tdot,
    _row_factors,
    _split16_cols,
    _state_offsets,
    _tf32_operand,
)
from triton_kda.configs import (
    _kpad,
    arch_of,
    cdiv,
    pow2_ceil,
    precision_of,
    state_candidates,
    state_config,
    state_narrow,
    tuned,
)
from triton_kda.launch import launch_kernel
from triton_kda.state_cp import (
    ENV_CKPT_CHUNKS,
    checkpoint_chunks,
    cp_end_gradients,
    cp_initial_states,
    plan_checkpoints,
    plan_pieces,
    state_shape,
)
from triton_kda.wy import IntraOut, pairs


def grad_state_dtype(dtype: torch.dtype) -> torch.dtype:
    """Storage dtype of the per-chunk states h and state gradients dh that the backward reads: bf16 for bf16 inputs
    (half the traffic and memory; the products read them into fp32), fp32 otherwise (fp16's range is too small for
    states, fp32 inputs keep fp32 accuracy)."""
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float32


@triton.jit
def _seq_state_coords(cu_seqlens, i_n, i_v, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                      V_FIRST: tl.constexpr):
    """Sequence start (int64) and length (int32), the K/V offsets of this program's V block, their mask, and the
    element offsets of that [BK, BV] block inside one [K, V] state ([V, K] if V_FIRST)."""
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    T = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos).to(tl.int32)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    return bos, T, o_k, o_v, m_kv, _state_offsets(o_k, o_v, K, V, V_FIRST)


@triton.jit
def _kda_state_fwd_kernel(
    qg, kg, w, u, Aqk, gl, rs, h0, o, ht, h, v_new, ckpt, ckpt_slot,
    cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_O: tl.constexpr, STORE_HT: tl.constexpr, STORE_H: tl.constexpr,
    STORE_VNEW: tl.constexpr, STORE_CKPT: tl.constexpr, V_FIRST: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr, PAIRS: tl.constexpr,
):
    """qg, kg, w: [TT, HV, K]; u, o, v_new: [TT, HV, V]; Aqk: [TT, HV, BT]; gl: [NT, HV, K] fp32 (log2 units);
    h0, ht: [N, HV, K, V] fp32 ([N, HV, V, K] if V_FIRST); h: [NT, HV, K, V] (same layout rule as the states).
    Without STORE_O (the backward's recompute of h and v_new) qg and Aqk are not read and o is not formed. With
    STORE_CKPT the fp32 state at the start of every chunk c with ckpt_slot[c] >= 0 goes to ckpt[ckpt_slot[c]]
    ([P, HV, K, V] fp32, layout as h0), from which a recompute can start there. With PAIRS, qg, kg and w are fp16
    pairs with row factors rs [TT, HV] (`wy.IntraOut`): their products take S and v_new split in fp16
    (`_jit._pair_dot`), and nothing of them is split in the chunk loop."""
    i_v, i_n, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, o_k, o_v, m_kv, off_kv = _seq_state_coords(cu_seqlens, i_n, i_v, K, V, BK, BV, V_FIRST)
    b_S = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        b_S += tl.load(h0 + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, mask=m_kv, other=0.0)
    c_base = tl.load(chunk_offsets + i_n).to(tl.int64)
    for i_c in range(tl.cdiv(T, BT)):
        t0 = i_c * BT
        if STORE_H:
            tl.store(h + ((c_base + i_c) * HV + i_hv) * K * V + off_kv, b_S.to(h.dtype.element_ty), mask=m_kv)
        if STORE_CKPT:
            slot = tl.load(ckpt_slot + c_base + i_c).to(tl.int64)
            if slot >= 0:
                tl.store(ckpt + (slot * HV + i_hv) * K * V + off_kv, b_S, mask=m_kv)
        if PAIRS:
            p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                    (1, 0))
            p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
            b_rs = _row_factors(rs, bos, i_hv, T, t0, HV, BT)
            s_hi, s_lo, s_dn = _split16_cols(b_S)
            w_hi, w_lo = _load_pair(w, bos, i_hv, T, t0, HV, K, BT, BK)
            b_vn = tl.load(p_u, boundary_check=(0, 1)).to(tl.float32)
            b_vn -= _pair_dot(w_hi, w_lo, s_hi, s_lo, s_dn) * b_rs[:, None]
            b_vnop = _finite_or_zero(b_vn)
            if STORE_O:
                qg_hi, qg_lo = _load_pair(qg, bos, i_hv, T, t0, HV, K, BT, BK)
                b_o = _pair_dot(qg_hi, qg_lo, s_hi, s_lo, s_dn) * b_rs[:, None]
                b_o += _dot_exact(tl.load(p_A, boundary_check=(0, 1)), b_vnop, None, PREC)
                p_o = tl.make_block_ptr(o + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                        (1, 0))
                tl.store(p_o, b_o.to(p_o.dtype.element_ty), boundary_check=(0, 1))
            if STORE_VNEW:
                p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV),
                                         (BT, BV), (1, 0))
                tl.store(p_vn, b_vn.to(p_vn.dtype.element_ty), boundary_check=(0, 1))
            b_gl = tl.load(gl + ((c_base + i_c) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_S *= tl.exp2(b_gl)[:, None]
            b_S += _pair_tdot(kg, b_rs, b_vnop, bos, i_hv, T, t0, HV, K, BT, BK)
        else:  # 16-bit inputs, or fp32 ones whose w, qg, kg are plain
            p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            p_u = tl.make_block_ptr(u + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
            p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
            # operands formed here or stored in fp32 (S, v_new, Aqk) rounded once; w, qg, kg are stored in the input
            # dtype (exact in TF32)
            b_Sop = _tf32_operand(_op(b_S, IS_BF16), PREC)
            b_vn = tl.load(p_u, boundary_check=(0, 1)).to(tl.float32)
            b_vn -= _dot_exact(_op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16), b_Sop, None, PREC)
            b_vnop = _tf32_operand(_op(_finite_or_zero(b_vn), IS_BF16), PREC)
            if STORE_O:
                b_o = _dot_exact(_op(tl.load(p_qg, boundary_check=(0, 1)), IS_BF16), b_Sop, None, PREC)
                b_o += _dot_exact(_tf32_operand(_op(tl.load(p_A, boundary_check=(0, 1)), IS_BF16), PREC), b_vnop, None,
                                  PREC)
                p_o = tl.make_block_ptr(o + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                        (1, 0))
                tl.store(p_o, b_o.to(p_o.dtype.element_ty), boundary_check=(0, 1))
            if STORE_VNEW:
                p_vn = tl.make_block_ptr(v_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                         (1, 0))
                tl.store(p_vn, b_vn.to(p_vn.dtype.element_ty), boundary_check=(0, 1))
            b_gl = tl.load(gl + ((c_base + i_c) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_S *= tl.exp2(b_gl)[:, None]
            b_S += _dot_exact(tl.trans(_op(tl.load(p_kg, boundary_check=(0, 1)), IS_BF16)), b_vnop, None, PREC)
    if STORE_HT:
        tl.store(ht + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, b_S, mask=m_kv)


class StateOut(NamedTuple):
    o: torch.Tensor | None              # [TT, HV, V] in the input dtype (None without store_o)
    final_state: torch.Tensor | None    # [N, HV, K, V] fp32 (V-first if asked)
    h: torch.Tensor | None              # [NT, HV, K, V] state at each chunk start
    v_new: torch.Tensor | None          # [TT, HV, V]
    kept: torch.Tensor | None           # [P, HV, K, V] fp32 (V-first if asked): the states kept with ckpt_every


def state_fwd(intra: IntraOut, initial_state, plan, BT: int, V: int, *, output_final_state: bool,
              state_v_first: bool, store_h: bool, store_v_new: bool, h_dtype: torch.dtype,
              store_o: bool = True, ckpt_every: int = 0, start: torch.Tensor | None = None) -> StateOut:
    """Launch `_kda_state_fwd_kernel` over the sequences (or their intra-card CP pieces). Without `store_o` (the
    backward's recompute of h and v_new) o is not formed: StateOut.o is None. ckpt_every = L > 0 also keeps the
    state every L chunks of each sequence (StateOut.kept; L from `state_cp.checkpoint_chunks`). `start`, such kept
    states, runs the pieces between them in parallel instead, each from its kept state, with the V blocks of the
    forward that kept them (so its products repeat the forward's bit for bit); `initial_state` is then not read (the
    first piece of a sequence kept it)."""
    TT, HV, K = intra.w.shape
    dev, dt = intra.w.device, intra.w.dtype
    arch, es = arch_of(dev), intra.w.element_size()
    pair = pairs(intra)
    o = torch.empty(TT if store_o else 0, HV, V, device=dev, dtype=dt)
    # intra-card CP: long sequences run as pieces, each from its start state (state_cp.py)
    pieces = plan_pieces(plan.lens, BT, HV, K, V, es, dev, seqs=plan)
    narrow = state_narrow((pieces.N if pieces is not None else plan.N) * HV, V, dev)
    runs, h0, ckpt = plan, initial_state, None
    if start is not None:
        L = checkpoint_chunks(plan.lens, BT, HV, K, V, es, dev)
        runs = plan_checkpoints(plan, BT, L).pieces if L else None
        if runs is None or runs.N != start.shape[0]:
            raise RuntimeError(f"chunk_kda's backward got {start.shape[0]} kept states, but this call keeps one every "
                               f"{L} chunks ({runs.N if runs is not None else 0} states): was "
                               f"{ENV_CKPT_CHUNKS} changed between the forward and the backward?")
        h0, pieces = start, None
    elif pieces is not None:
        h0 = cp_initial_states(intra.kg, intra.w, intra.u, intra.gl, intra.rs, initial_state, plan, pieces, BT,
                               state_v_first=state_v_first, prec=precision_of(dt))
        runs = pieces
    if ckpt_every:
        ckpt = plan_checkpoints(plan, BT, ckpt_every)
    def shape(n: int) -> tuple:
        return state_shape(n, HV, K, V, state_v_first)

    kept = torch.empty(shape(ckpt.pieces.N), device=dev, dtype=torch.float32) if ckpt is not None else None
    ht = torch.empty(shape(runs.N), device=dev, dtype=torch.float32) if output_final_state else None
    h = torch.empty(shape(plan.NT), device=dev, dtype=h_dtype) if store_h else None
    v_new = torch.empty(TT, HV, V, device=dev, dtype=dt) if store_v_new else None

    def launch(cfg):
        launch_kernel(_kda_state_fwd_kernel, (cdiv(V, cfg.BV), runs.N, HV),
            intra.qg, intra.kg, intra.w, intra.u, intra.Aqk, intra.gl, intra.rs if pair else intra.gl,
            h0 if h0 is not None else o, o, ht if ht is not None else o,
            h if h is not None else o, v_new if v_new is not None else o,
            kept if kept is not None else o, ckpt.slots if ckpt is not None else runs.chunk_offsets,
            runs.cu_seqlens, runs.chunk_offsets,
            HV=HV, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=cfg.BV,
            HAS_H0=h0 is not None, STORE_O=store_o, STORE_HT=output_final_state, STORE_H=store_h,
            STORE_VNEW=store_v_new, STORE_CKPT=ckpt is not None, V_FIRST=state_v_first, IS_BF16=dt == torch.bfloat16,
            PREC=precision_of(dt), PAIRS=pair, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )

    key = ("state_fwd", arch, dt, K, V, BT, HV, pow2_ceil(runs.N), narrow, store_o, store_h, store_v_new, pair)
    launch(tuned(key, state_config(arch, K, V, es, narrow), state_candidates(arch, K, V, es), launch))
    if pieces is not None and ht is not None:
        ht = ht[pieces.last]
    return StateOut(o if store_o else None, ht, h, v_new, kept)


@triton.jit
def _kda_state_bwd_kernel(
    qg, kg, w, Aqk, gl, rs, do, dht, dh, dv_new, dh0,
    cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_DHT: tl.constexpr, STORE_DH0: tl.constexpr, V_FIRST: tl.constexpr, IS_BF16: tl.constexpr,
    PREC: tl.constexpr, PAIRS: tl.constexpr,
):
    """Reverse pass over the chunks of one (V block, sequence, v-head), dS = gradient of the state after a chunk:
        dv_new = Aqk^T do + kg dS;   dh[c] = dS;   dS <- 2^(G_last) * dS + qg^T do - w^T dv_new
    qg, kg, w: [TT, HV, K]; do: [TT, HV, V]; Aqk: [TT, HV, BT]; gl: [NT, HV, K] fp32 (log2 units);
    dht, dh0: [N, HV, K, V] fp32 ([N, HV, V, K] if V_FIRST). Writes dh [NT, HV, K, V] (grad_state_dtype, always
    K-first), dv_new [TT, HV, V] fp32 and, with STORE_DH0, dh0 (dS before the first chunk). With PAIRS, qg, kg
    and w are fp16 pairs with row factors rs [TT, HV] (`wy.IntraOut`), as in `_kda_state_fwd_kernel`."""
    i_v, i_n, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, o_k, o_v, m_kv, off_kv = _seq_state_coords(cu_seqlens, i_n, i_v, K, V, BK, BV, V_FIRST)
    b_dS = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_DHT:
        b_dS += tl.load(dht + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, mask=m_kv, other=0.0)
    c_base = tl.load(chunk_offsets + i_n).to(tl.int64)
    NC = tl.cdiv(T, BT)
    for i_r in range(NC):
        i_c = NC - 1 - i_r
        t0 = i_c * BT
        p_dh = dh + ((c_base + i_c) * HV + i_hv) * K * V + o_k[:, None] * V + o_v[None, :]
        tl.store(p_dh, b_dS.to(dh.dtype.element_ty), mask=m_kv)
        if PAIRS:
            p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
            p_do = tl.make_block_ptr(do + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                     (1, 0))
            b_rs = _row_factors(rs, bos, i_hv, T, t0, HV, BT)
            b_do = tl.load(p_do, boundary_check=(0, 1)).to(tl.float32)
            b_dvn = _dot(tl.trans(tl.load(p_A, boundary_check=(0, 1))), b_do, None, PREC)
            kg_hi, kg_lo = _load_pair(kg, bos, i_hv, T, t0, HV, K, BT, BK)
            s_hi, s_lo, s_dn = _split16_cols(b_dS)
            b_dvn += _pair_dot(kg_hi, kg_lo, s_hi, s_lo, s_dn) * b_rs[:, None]
            p_dvn = tl.make_block_ptr(dv_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV),
                                      (BT, BV), (1, 0))
            tl.store(p_dvn, b_dvn, boundary_check=(0, 1))
            b_gl = tl.load(gl + ((c_base + i_c) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_dS *= tl.exp2(b_gl)[:, None]
            b_dS += _pair_tdot(qg, b_rs, b_do, bos, i_hv, T, t0, HV, K, BT, BK)
            b_dS -= _pair_tdot(w, b_rs, b_dvn, bos, i_hv, T, t0, HV, K, BT, BK)
        else:  # 16-bit inputs, or fp32 ones whose qg, kg, w are plain
            p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT), (1, 0))
            p_do = tl.make_block_ptr(do + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV), (1, 0))
            p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
            # every operand rounded where it is used: rounding do once and skipping qg, kg, w here (as in the forward)
            # made this kernel slower on the H100 (fp16 B2 T8192 H32: 1358 -> 2052 us)
            b_do = _op(tl.load(p_do, boundary_check=(0, 1)), IS_BF16)
            b_dvn = _dot(tl.trans(_op(tl.load(p_A, boundary_check=(0, 1)), IS_BF16)), b_do, None, PREC)
            b_dvn += _dot(_op(tl.load(p_kg, boundary_check=(0, 1)), IS_BF16), _op(b_dS, IS_BF16), None, PREC)
            p_dvn = tl.make_block_ptr(dv_new + (bos * HV + i_hv) * V, (T, V), (HV * V, 1), (t0, i_v * BV), (BT, BV),
                                      (1, 0))
            tl.store(p_dvn, b_dvn, boundary_check=(0, 1))
            b_gl = tl.load(gl + ((c_base + i_c) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_dS *= tl.exp2(b_gl)[:, None]
            b_dS += _dot(tl.trans(_op(tl.load(p_qg, boundary_check=(0, 1)), IS_BF16)), b_do, None, PREC)
            b_dS -= _dot(tl.trans(_op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16)), _op(b_dvn, IS_BF16), None, PREC)
    if STORE_DH0:
        tl.store(dh0 + (i_n * HV + i_hv).to(tl.int64) * K * V + off_kv, b_dS, mask=m_kv)


class StateBwdOut(NamedTuple):
    dh: torch.Tensor            # [NT, HV, K, V] (grad_state_dtype), gradient of the state after each chunk (K-first)
    dv_new: torch.Tensor        # [TT, HV, V] fp32
    dh0: torch.Tensor | None    # [N, HV, K, V] fp32 ([N, HV, V, K] if state_v_first), gradient of initial_state


def state_bwd(qg, kg, w, Aqk, gl, rs, do, dht, plan, BT: int, V: int, *, want_dh0: bool, state_v_first: bool,
              prec: str) -> StateBwdOut:
    """Launch `_kda_state_bwd_kernel`. qg, kg, w: [TT, HV, K] (fp16 pairs where rs [TT, HV] is not empty:
    `wy.IntraOut`); Aqk: [TT, HV, BT]; gl: [NT, HV, K] fp32;
    do: [TT, HV, V] (contiguous); dht: None or [N, HV, K, V] fp32 (V-first if state_v_first); plan: ChunkPlan."""
    TT, HV, K = w.shape
    dev = w.device
    arch = arch_of(dev)
    dh = torch.empty(plan.NT, HV, K, V, device=dev, dtype=grad_state_dtype(w.dtype))
    dv_new = torch.empty(TT, HV, V, device=dev, dtype=torch.float32)
    # intra-card CP: long sequences run as pieces, each from the gradient of its end state (state_cp.py)
    pieces = plan_pieces(plan.lens, BT, HV, K, V, w.element_size(), dev, seqs=plan)
    runs = plan
    if pieces is not None:
        # the pieces' maps take the serial pass's products (fp32 pairs: `_jit._pair_dot`; fp32 plain: tf32x3)
        dht = cp_end_gradients(qg, kg, w, Aqk, gl, rs, do, dht, plan, pieces, BT, state_v_first=state_v_first,
                               prec=precision_of(w.dtype))
        runs = pieces
    pair = rs.numel() > 0
    cfg = state_config(arch, K, V, w.element_size(), state_narrow(runs.N * HV, V, dev), pair_bwd=pair)
    shape = (runs.N, HV, V, K) if state_v_first else (runs.N, HV, K, V)
    dh0 = torch.empty(shape, device=dev, dtype=torch.float32) if want_dh0 else None
    launch_kernel(_kda_state_bwd_kernel, (cdiv(V, cfg.BV), runs.N, HV),
        qg, kg, w, Aqk, gl, rs if pair else gl, do, dht if dht is not None else dh, dh, dv_new,
        dh0 if dh0 is not None else dh,
        runs.cu_seqlens, runs.chunk_offsets,
        HV=HV, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=cfg.BV, HAS_DHT=dht is not None, STORE_DH0=want_dh0,
        V_FIRST=state_v_first, IS_BF16=w.dtype == torch.bfloat16, PREC=prec, PAIRS=pair,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if pieces is not None and dh0 is not None:
        dh0 = dh0[pieces.first]
    return StateBwdOut(dh, dv_new, dh0)
