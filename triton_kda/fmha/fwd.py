"""The FMHA forward kernel: one online-softmax pass over a dense key range (causal / sliding window / kv_lens) and/or
a gathered key set (per-query top-k indices, -1 = empty slot), with per-head sinks applied in the epilogue.

Grid: axis 0 = query tiles (tokens x packed heads, see configs.py), axis 1 = batch x kv heads x head groups,
axis 2 = kv splits x value-dim splits. A program with `NUM_SPLITS > 1` or `PARTIAL` writes its own softmax average
(fp32) and its log-sum-exp without the sink; `merge.py` combines those. Base-2 exponentials throughout, lse is
returned in natural-log units.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from triton_kda.configs import cdiv
from triton_kda.fmha.configs import FmhaConfig

LOG2E = 1.4426950408889634


@triton.jit
def _fmha_softmax_step(acc, m_i, l_i, s, v, MASKED: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Fold one block of base-2 logits `s` [BLOCK_M, BLOCK_N] (-inf where masked) and its values `v`
    [BLOCK_N, BLOCK_DV] into the running (acc, m_i, l_i)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    if MASKED:
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    alpha = tl.math.exp2(m_i - m_sub)
    p = tl.math.exp2(s - m_sub[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _fmha_dense_blocks(
    acc, m_i, l_i, q, k_base, v_base, stride_ks: tl.constexpr, stride_vs: tl.constexpr,
    kv_lo, blk_lo, blk_hi, kv_hi, pos, window, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, SAME_KV: tl.constexpr,
    D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Key blocks `[kv_lo + i * BLOCK_N, +BLOCK_N)` for i in [blk_lo, blk_hi). MASKED blocks check the key bound
    `kv_hi` and the causal / window limits per row (`pos` = the row's key position); the others need no mask."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_offs = offs_n[:, None] * stride_ks + offs_d[None, :]
    v_offs = offs_n[:, None] * stride_vs + offs_dv[None, :]
    for i in range(blk_lo, blk_hi):
        j0 = kv_lo + i * BLOCK_N
        kj = j0 + offs_n
        if MASKED:
            k_ok = kj < kv_hi
            k = tl.load(k_base + j0 * stride_ks + k_offs, mask=k_ok[:, None], other=0.0)
        else:
            k = tl.load(k_base + j0 * stride_ks + k_offs)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        if MASKED:
            ok = k_ok[None, :]
            if CAUSAL:
                ok = ok & (kj[None, :] <= pos[:, None])
            if HAS_WINDOW:
                ok = ok & (kj[None, :] > pos[:, None] - window)
            s = tl.where(ok, s, float("-inf"))
        if SAME_KV:
            v = k
        elif MASKED:
            v = tl.load(v_base + j0 * stride_vs + v_offs, mask=k_ok[:, None], other=0.0)
        else:
            v = tl.load(v_base + j0 * stride_vs + v_offs)
        acc, m_i, l_i = _fmha_softmax_step(acc, m_i, l_i, s, v, MASKED, DOT_PRECISION)
    return acc, m_i, l_i


@triton.jit
def _fmha_gather_blocks(
    acc, m_i, l_i, q, k_base, v_base, stride_ks: tl.constexpr, stride_vs: tl.constexpr,
    idx_base, blk_lo, blk_hi, topk, kv_len, qk_scale,
    SAME_KV: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Slots `[i * BLOCK_N, +BLOCK_N)` of one token's index list for i in [blk_lo, blk_hi); a slot holding -1 (or
    anything outside [0, kv_len)) contributes nothing."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    offs_dv = tl.arange(0, BLOCK_DV)
    for i in range(blk_lo, blk_hi):
        slot = i * BLOCK_N + offs_n
        idx = tl.load(idx_base + slot, mask=slot < topk, other=-1)
        ok = (idx >= 0) & (idx < kv_len)
        rows = tl.where(ok, idx, 0).to(tl.int64)
        k = tl.load(k_base + rows[:, None] * stride_ks + offs_d[None, :], mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        if SAME_KV:
            v = k
        else:
            v = tl.load(v_base + rows[:, None] * stride_vs + offs_dv[None, :], mask=ok[:, None], other=0.0)
        acc, m_i, l_i = _fmha_softmax_step(acc, m_i, l_i, s, v, True, DOT_PRECISION)
    return acc, m_i, l_i


@triton.jit
def fmha_tile(
    pid_t, tile_seq_ptr, tile_tok_ptr, cu_q_ptr, T, HKV, G, N_SEQ,
    HP: tl.constexpr, N_HG: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """The query rows of program (pid_t, program_id(1)): its sequence (>= N_SEQ: a varlen grid's spare tile, the
    program returns), batch index (int64), kv head, first token of the tile and first row of the sequence in q,
    the sequence's query count, and per row (block_t tokens x HP packed heads) the token, query head, validity."""
    pid_bh = tl.program_id(1)
    hg = pid_bh % N_HG
    kvh = (pid_bh // N_HG) % HKV
    b = pid_bh // (N_HG * HKV)
    if IS_VARLEN:
        seq = tl.load(tile_seq_ptr + pid_t)
        seq_c = tl.minimum(seq, N_SEQ - 1)
        t0 = tl.load(tile_tok_ptr + pid_t)
        bos = tl.load(cu_q_ptr + seq_c).to(tl.int64)
        seq_t = (tl.load(cu_q_ptr + seq_c + 1) - bos).to(tl.int32)
    else:
        seq = b
        t0 = pid_t * BLOCK_T
        bos = 0
        seq_t = T
    offs_m = tl.arange(0, BLOCK_M)
    tok = t0 + offs_m // HP
    head = hg * HP + offs_m % HP
    row_ok = (offs_m // HP < BLOCK_T) & (tok < seq_t) & (head < G)
    return seq, b.to(tl.int64), kvh, t0, bos, seq_t, tok, kvh * G + head, row_ok


@triton.jit
def fmha_key_extent(cu_ptr, lens_ptr, seq, S, IS_VARLEN: tl.constexpr, HAS_LENS: tl.constexpr):
    """(first row, valid rows) of sequence `seq`'s keys: its varlen offsets (or all S rows), capped by lens."""
    if IS_VARLEN:
        bos = tl.load(cu_ptr + seq).to(tl.int64)
        n = (tl.load(cu_ptr + seq + 1) - bos).to(tl.int32)
    else:
        bos = 0
        n = S
    if HAS_LENS:
        n = tl.load(lens_ptr + seq)
    return bos, n


@triton.jit
def _fmha_attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, idx_ptr, o_ptr, lse_ptr, sink_ptr,
    cu_q_ptr, cu_k_ptr, cu_c_ptr, kv_lens_ptr, c_lens_ptr, tile_seq_ptr, tile_tok_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kh, stride_vb, stride_vh, stride_cb, stride_ch, stride_wb, stride_wh,
    stride_ib, stride_it,
    T, S, S_C, HQ, HKV, G, N_SEQ, TOPK, window, qk_scale, n_rows,
    STRIDE_KS: tl.constexpr, STRIDE_VS: tl.constexpr, STRIDE_CS: tl.constexpr, STRIDE_WS: tl.constexpr,
    HP: tl.constexpr, N_HG: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_DV: tl.constexpr,
    HAS_DENSE: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_GATHER: tl.constexpr,
    HAS_SINK: tl.constexpr, HAS_KV_LENS: tl.constexpr, HAS_C_LENS: tl.constexpr, IS_VARLEN: tl.constexpr,
    SAME_KV: tl.constexpr, SAME_KV_C: tl.constexpr, NUM_SPLITS: tl.constexpr, WRITE_PARTIAL: tl.constexpr,
    REVERSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """o[b, t, h, :] = softmax over the keys of query (t, h) (dense range and/or gathered slots, sink in the
    denominator) times their values. q `[B, T, HQ, D]`; k/kc `[B, S(_C), HKV, D]`; v/vc `[B, S(_C), HKV, DV]`;
    idx `[B, T, TOPK]` int; o `[NUM_SPLITS, B*T*HQ, DV]` (q's dtype, or fp32 when WRITE_PARTIAL); lse
    `[NUM_SPLITS, B*T*HQ]` fp32 (natural log); sink `[HQ]` fp32."""
    pid_t = tl.program_id(0)
    if REVERSE:
        pid_t = tl.num_programs(0) - 1 - pid_t
    seq, b64, kvh, t0, bos, seq_t, tok, qh, row_ok = fmha_tile(
        pid_t, tile_seq_ptr, tile_tok_ptr, cu_q_ptr, T, HKV, G, N_SEQ, HP, N_HG, BLOCK_T, BLOCK_M, IS_VARLEN)
    if seq >= N_SEQ:
        return
    pid_s = tl.program_id(2)
    split = pid_s % NUM_SPLITS
    dv0 = (pid_s // NUM_SPLITS) * BLOCK_DV
    if HAS_DENSE:
        k_bos, kv_len = fmha_key_extent(cu_k_ptr, kv_lens_ptr, seq, S, IS_VARLEN, HAS_KV_LENS)
    if HAS_GATHER:
        c_bos, c_len = fmha_key_extent(cu_c_ptr, c_lens_ptr, seq, S_C, IS_VARLEN, HAS_C_LENS)

    offs_d = tl.arange(0, D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_rows = b64 * stride_qb + (bos + tok).to(tl.int64) * stride_qt + qh * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)

    if HAS_DENSE:
        shift = kv_len - seq_t
        pos = tok + shift
        p_lo = t0 + shift
        p_hi = tl.minimum(t0 + BLOCK_T, seq_t) - 1 + shift
        hi = kv_len
        full_hi = kv_len
        if CAUSAL:
            hi = tl.minimum(kv_len, p_hi + 1)
            full_hi = tl.minimum(hi, p_lo + 1)
        lo = 0
        full_lo = 0
        if HAS_WINDOW:
            lo = tl.maximum(0, p_lo - window + 1)
            full_lo = tl.maximum(lo, p_hi - window + 1)
        n_blk = tl.cdiv(tl.maximum(hi - lo, 0), BLOCK_N)
        n_head = tl.minimum(tl.cdiv(full_lo - lo, BLOCK_N), n_blk)
        n_mid = tl.maximum(n_head, tl.minimum(tl.maximum(full_hi - lo, 0) // BLOCK_N, n_blk))
        per = tl.cdiv(n_blk, NUM_SPLITS)
        s_lo = split * per
        s_hi = tl.minimum(s_lo + per, n_blk)
        k_base = k_ptr + b64 * stride_kb + k_bos * STRIDE_KS + kvh * stride_kh
        v_base = v_ptr + b64 * stride_vb + k_bos * STRIDE_VS + kvh * stride_vh + dv0
        acc, m_i, l_i = _fmha_dense_blocks(
            acc, m_i, l_i, q, k_base, v_base, STRIDE_KS, STRIDE_VS, lo, s_lo, tl.minimum(n_head, s_hi), hi, pos,
            window, qk_scale, True, CAUSAL, HAS_WINDOW, SAME_KV, D, BLOCK_N, BLOCK_DV, DOT_PRECISION)
        acc, m_i, l_i = _fmha_dense_blocks(
            acc, m_i, l_i, q, k_base, v_base, STRIDE_KS, STRIDE_VS, lo, tl.maximum(n_head, s_lo),
            tl.minimum(n_mid, s_hi), hi, pos, window, qk_scale, False, CAUSAL, HAS_WINDOW, SAME_KV, D, BLOCK_N,
            BLOCK_DV, DOT_PRECISION)
        acc, m_i, l_i = _fmha_dense_blocks(
            acc, m_i, l_i, q, k_base, v_base, STRIDE_KS, STRIDE_VS, lo, tl.maximum(n_mid, s_lo), s_hi, hi, pos,
            window, qk_scale, True, CAUSAL, HAS_WINDOW, SAME_KV, D, BLOCK_N, BLOCK_DV, DOT_PRECISION)

    if HAS_GATHER:
        n_gblk = tl.cdiv(TOPK, BLOCK_N)
        gper = tl.cdiv(n_gblk, NUM_SPLITS)
        g_lo = split * gper
        g_hi = tl.minimum(g_lo + gper, n_gblk)
        kc_base = kc_ptr + b64 * stride_cb + c_bos * STRIDE_CS + kvh * stride_ch
        vc_base = vc_ptr + b64 * stride_wb + c_bos * STRIDE_WS + kvh * stride_wh + dv0
        idx_base = idx_ptr + b64 * stride_ib + (bos + t0) * stride_it
        acc, m_i, l_i = _fmha_gather_blocks(
            acc, m_i, l_i, q, kc_base, vc_base, STRIDE_CS, STRIDE_WS, idx_base, g_lo, g_hi, TOPK, c_len, qk_scale,
            SAME_KV_C, D, BLOCK_N, BLOCK_DV, DOT_PRECISION)

    if HAS_SINK and not WRITE_PARTIAL:
        sink = tl.load(sink_ptr + qh, mask=row_ok, other=0.0) * 1.4426950408889634
        m_f = tl.maximum(m_i, sink)
        alpha = tl.math.exp2(m_i - m_f)
        l_i = l_i * alpha + tl.math.exp2(sink - m_f)
        acc = acc * alpha[:, None]
        m_i = m_f
    has_keys = l_i > 0
    l_safe = tl.where(has_keys, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(has_keys, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    grow = (b64 * T + bos + tok) * HQ + qh
    split_off = split.to(tl.int64) * n_rows
    o_ptrs = o_ptr + (split_off + grow)[:, None] * DV + dv0 + offs_dv[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    if dv0 == 0:
        tl.store(lse_ptr + split_off + grow, lse, mask=row_ok)


@dataclass(frozen=True)
class KeySet:
    """Keys and values of one branch. k `[B, S, HKV, D]`, v `[B, S, HKV, DV]` (strided views allowed, unit stride
    on the last dim); cu `[N + 1]` int (varlen) or None; lens `[N]` int32 valid rows per sequence or None."""

    k: torch.Tensor
    v: torch.Tensor
    cu: torch.Tensor | None
    lens: torch.Tensor | None


@dataclass(frozen=True)
class AttnProblem:
    """A validated call: q `[B, T, HQ, D]` contiguous in its last dim; at least one of `dense` (with causal /
    window) and `gather` (with idx `[B, T, TOPK]` int32 contiguous); sinks `[HQ]` fp32 or None."""

    q: torch.Tensor
    scale: float
    dense: KeySet | None
    causal: bool
    window: int | None
    gather: KeySet | None
    idx: torch.Tensor | None
    sinks: torch.Tensor | None
    cu_seqlens: torch.Tensor | None
    partial: bool


def _varlen_tiles(cu: torch.Tensor, block_t: int, n_upper: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tile (sequence, first token) for varlen, computed on the device with no host sync; tiles past the last
    one get sequence N (the kernel returns at once)."""
    cu = cu.to(torch.int64)
    lens = cu[1:] - cu[:-1]
    n_tiles = (lens + block_t - 1) // block_t
    ends = torch.cumsum(n_tiles, 0)
    ids = torch.arange(n_upper, device=cu.device)
    seq = torch.searchsorted(ends, ids, right=True)
    first = (ends - n_tiles)[seq.clamp(max=lens.numel() - 1)]
    tok = (ids - first) * block_t
    return seq.to(torch.int32), tok.to(torch.int32)


class TileGrid(NamedTuple):
    """Query tiles of `block_t` tokens: grid axis 0 and the batch factor of axis 1, the sequence count, and for
    varlen the per-tile (sequence, first token) tables (None otherwise)."""

    grid_t: int
    grid_b: int
    n_seq: int
    tile_seq: torch.Tensor | None
    tile_tok: torch.Tensor | None


def tile_grid(p: AttnProblem, block_t: int) -> TileGrid:
    B, T = p.q.shape[:2]
    if p.cu_seqlens is None:
        return TileGrid(cdiv(T, block_t), B, B, None, None)
    n_seq = p.cu_seqlens.numel() - 1
    tile_seq, tile_tok = _varlen_tiles(p.cu_seqlens, block_t, cdiv(T, block_t) + n_seq)
    return TileGrid(tile_seq.numel(), 1, n_seq, tile_seq, tile_tok)


def or_placeholder(t: torch.Tensor | None, placeholder: torch.Tensor) -> torch.Tensor:
    """An absent operand's pointer argument: never dereferenced (its constexpr switch is off)."""
    return placeholder if t is None else t


def attn_fwd(p: AttnProblem, cfg: FmhaConfig, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel (and the split combine when `num_splits > 1`). Returns o `[B, T, HQ, DV]` (q's dtype; fp32
    in partial mode) and lse `[B, T, HQ]` fp32."""
    from triton_kda.fmha.merge import merge_splits

    q = p.q
    B, T, HQ, D = q.shape
    ref = p.dense if p.dense is not None else p.gather
    HKV, DV = ref.k.shape[2], ref.v.shape[3]
    G = HQ // HKV
    gather = p.gather is not None
    hp = min(G, cfg.block_m)
    block_t = 1 if gather else cfg.block_m // hp
    block_dv = min(DV, cfg.block_dv or DV)
    n_hg = cdiv(G, hp)
    n_dv = DV // block_dv
    n_rows = B * T * HQ
    write_partial = p.partial or num_splits > 1
    dev = q.device
    o_dtype = torch.float32 if write_partial else q.dtype
    o = torch.empty(num_splits, n_rows, DV, dtype=o_dtype, device=dev)
    lse = torch.empty(num_splits, n_rows, dtype=torch.float32, device=dev)
    tg = tile_grid(p, block_t)
    dense, gth = p.dense, p.gather
    # Absent operands get a placeholder pointer and zero strides.
    dk, dv_ = (dense.k, dense.v) if dense else (lse, lse)
    gk, gv = (gth.k, gth.v) if gth else (lse, lse)
    dk_s, dv_s = (dense.k.stride(), dense.v.stride()) if dense else ((0,) * 4, (0,) * 4)
    gk_s, gv_s = (gth.k.stride(), gth.v.stride()) if gth else ((0,) * 4, (0,) * 4)
    istr = (p.idx.stride(0), p.idx.stride(1)) if gather else (0, 0)

    def opt(t):
        return or_placeholder(t, lse)

    grid = (tg.grid_t, tg.grid_b * HKV * n_hg, num_splits * n_dv)
    _fmha_attn_fwd_kernel[grid](
        q, dk, dv_, gk, gv, opt(p.idx), o, lse, opt(p.sinks),
        opt(p.cu_seqlens), opt(dense.cu if dense else None), opt(gth.cu if gth else None),
        opt(dense.lens if dense else None), opt(gth.lens if gth else None), opt(tg.tile_seq), opt(tg.tile_tok),
        q.stride(0), q.stride(1), q.stride(2),
        dk_s[0], dk_s[2], dv_s[0], dv_s[2], gk_s[0], gk_s[2], gv_s[0], gv_s[2], *istr,
        T, dense.k.shape[1] if dense else 0, gth.k.shape[1] if gth else 0, HQ, HKV, G, tg.n_seq,
        p.idx.shape[2] if gather else 0, p.window or 0, p.scale * LOG2E, n_rows,
        STRIDE_KS=dk_s[1], STRIDE_VS=dv_s[1], STRIDE_CS=gk_s[1], STRIDE_WS=gv_s[1],
        HP=hp, N_HG=n_hg, BLOCK_T=block_t, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, D=D, DV=DV, BLOCK_DV=block_dv,
        HAS_DENSE=dense is not None, CAUSAL=p.causal, HAS_WINDOW=p.window is not None, HAS_GATHER=gather,
        HAS_SINK=p.sinks is not None, HAS_KV_LENS=dense is not None and dense.lens is not None,
        HAS_C_LENS=gather and gth.lens is not None, IS_VARLEN=p.cu_seqlens is not None,
        SAME_KV=dense is not None and dense.k is dense.v and block_dv == D,
        SAME_KV_C=gather and gth.k is gth.v and block_dv == D,
        NUM_SPLITS=num_splits, WRITE_PARTIAL=write_partial, REVERSE=bool(p.causal and dense is not None),
        DOT_PRECISION=dot_precision(q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if num_splits > 1:
        o, lse = merge_splits(o, lse, HQ, None if p.partial else p.sinks, torch.float32 if p.partial else q.dtype)
    return o.view(B, T, HQ, DV), lse.view(B, T, HQ)


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot precision: IEEE products for fp32 inputs (the 1e-5 contract), the tensor-core default otherwise."""
    return "ieee" if dtype == torch.float32 else "tf32"
