"""The single-block sliding-window kernel: for a causal window whose keys, for every query of a tile, fit one block
of `BLOCK_K` keys (the 128-token window of DeepSeek-V4-style layers with 64+ MQA heads: one token per tile).

The softmax needs no running state: the scores of all the tile's keys are one `[BLOCK_M, BLOCK_K]` product,
accumulated over `BLOCK_D`-column slices of q and k; the probabilities then multiply the values `BLOCK_DV` columns
at a time (scaled by 1 / l in fp32) and each output slice is stored at once. Compared with the online-softmax kernel
(fwd.py) this holds no `[BLOCK_M, DV]` accumulator, so head dim 512 needs neither a value split (which recomputes
the scores) nor two warpgroups (whose layout computes the scores twice), and a program is small enough for several
to share an SM and overlap one tile's loads with another's products. The key rows are read twice (once per product,
from L2); q and o move once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_kda.configs import cdiv
from triton_kda.fmha.configs import WINDOW_MAX_KEYS, WindowConfig, window_keys, window_tokens
from triton_kda.fmha.fwd import (
    LOG2E,
    AttnProblem,
    dot_precision,
    fmha_key_extent,
    fmha_tile,
    or_placeholder,
    tile_grid,
)


@triton.jit
def _fmha_window_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sink_ptr, cu_q_ptr, cu_k_ptr, kv_lens_ptr, tile_seq_ptr, tile_tok_ptr,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh,
    T, S, HQ, HKV, G, N_SEQ, window, qk_scale,
    STRIDE_KS: tl.constexpr, STRIDE_VS: tl.constexpr,
    HP: tl.constexpr, N_HG: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    HAS_SINK: tl.constexpr, HAS_KV_LENS: tl.constexpr, IS_VARLEN: tl.constexpr, WRITE_PARTIAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """o[b, t, h, :] = softmax_j(q_th . k_j * scale; sink_h) v_j over the window p - W < j <= p of query (t, h) at
    key position p, all of a tile's keys in one block. q `[B, T, HQ, D]`; k `[B, S, HKV, D]`; v `[B, S, HKV, DV]`;
    o `[B*T*HQ, DV]` (q's dtype, or fp32 when WRITE_PARTIAL, then without the sink); lse `[B*T*HQ]` fp32 (natural
    log); sink `[HQ]` fp32."""
    seq, b64, kvh, t0, bos, seq_t, tok, qh, row_ok = fmha_tile(
        tl.program_id(0), tile_seq_ptr, tile_tok_ptr, cu_q_ptr, T, HKV, G, N_SEQ, HP, N_HG, BLOCK_T, BLOCK_M,
        IS_VARLEN)
    if seq >= N_SEQ:
        return
    k_bos, kv_len = fmha_key_extent(cu_k_ptr, kv_lens_ptr, seq, S, IS_VARLEN, HAS_KV_LENS)
    # bottom-right causal alignment: query t sits at key position t + kv_len - seq_t
    shift = kv_len - seq_t
    pos = tok + shift
    lo = tl.maximum(0, t0 + shift - window + 1)
    hi = tl.minimum(kv_len, tl.minimum(t0 + BLOCK_T, seq_t) + shift)
    kj = lo + tl.arange(0, BLOCK_K)
    k_ok = kj < hi
    kj64 = kj.to(tl.int64)

    offs_d = tl.arange(0, BLOCK_D)
    q_rows = b64 * stride_qb + (bos + tok).to(tl.int64) * stride_qt + qh * stride_qh
    q_ptrs = q_ptr + q_rows[:, None] + offs_d[None, :]
    k_ptrs = k_ptr + b64 * stride_kb + kvh * stride_kh + (k_bos + kj64)[:, None] * STRIDE_KS + offs_d[None, :]
    s = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        qc = tl.load(q_ptrs + d0, mask=row_ok[:, None], other=0.0)
        kc = tl.load(k_ptrs + d0, mask=k_ok[:, None], other=0.0)
        s = tl.dot(qc, tl.trans(kc), s, input_precision=DOT_PRECISION)
    ok = k_ok[None, :] & (kj[None, :] <= pos[:, None]) & (kj[None, :] > pos[:, None] - window)
    s = tl.where(ok, s * qk_scale, float("-inf"))

    m = tl.max(s, 1)
    if HAS_SINK and not WRITE_PARTIAL:
        sink = tl.load(sink_ptr + qh, mask=row_ok, other=0.0) * 1.4426950408889634
        m = tl.maximum(m, sink)
    m_sub = tl.where(m == float("-inf"), 0.0, m)
    p = tl.math.exp2(s - m_sub[:, None])
    l_i = tl.sum(p, 1)
    if HAS_SINK and not WRITE_PARTIAL:
        l_i += tl.math.exp2(sink - m_sub)
    has_keys = l_i > 0
    l_safe = tl.where(has_keys, l_i, 1.0)
    # p keeps its row maximum at exactly 1 in q's dtype; the 1 / l scaling is applied to each fp32 output slice
    p = p.to(v_ptr.dtype.element_ty)
    inv_l = 1.0 / l_safe
    lse = tl.where(has_keys, (m_sub + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))

    grow = (b64 * T + bos + tok) * HQ + qh
    offs_dv = tl.arange(0, BLOCK_DV)
    v_ptrs = v_ptr + b64 * stride_vb + kvh * stride_vh + (k_bos + kj64)[:, None] * STRIDE_VS + offs_dv[None, :]
    o_ptrs = o_ptr + grow[:, None] * DV + offs_dv[None, :]
    for c0 in range(0, DV, BLOCK_DV):
        vc = tl.load(v_ptrs + c0, mask=k_ok[:, None], other=0.0)
        oc = tl.dot(p, vc, input_precision=DOT_PRECISION) * inv_l[:, None]
        tl.store(o_ptrs + c0, oc.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + grow, lse, mask=row_ok)


def window_fits(p: AttnProblem, cfg: WindowConfig) -> tuple[bool, str]:
    """Whether the window kernel can run call `p` with launch `cfg`, and if not, why."""
    if p.dense is None or p.gather is not None or p.window is None:
        return False, "it runs a causal sliding window alone (no top-k gather, window given)"
    G = p.q.shape[2] // p.dense.k.shape[2]
    T = None if p.cu_seqlens is not None else p.q.shape[1]
    keys = window_keys(p.window, cfg.block_m, G, T)
    if keys > WINDOW_MAX_KEYS:
        return False, (f"a tile's keys (window {p.window} + {window_tokens(cfg.block_m, G)} tokens - 1) need a block "
                       f"of {keys} > {WINDOW_MAX_KEYS}")
    return True, ""


def window_fwd(p: AttnProblem, cfg: WindowConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the window kernel (the caller checked `window_fits`). Returns o `[B, T, HQ, DV]` (q's dtype; fp32 in
    partial mode) and lse `[B, T, HQ]` fp32."""
    q, keys = p.q, p.dense
    B, T, HQ, D = q.shape
    HKV, DV = keys.k.shape[2], keys.v.shape[3]
    G = HQ // HKV
    hp = min(G, cfg.block_m)
    block_t = window_tokens(cfg.block_m, G)
    n_hg = cdiv(G, hp)
    n_rows = B * T * HQ
    o = torch.empty(n_rows, DV, dtype=torch.float32 if p.partial else q.dtype, device=q.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=q.device)
    tg = tile_grid(p, block_t)
    ks, vs = keys.k.stride(), keys.v.stride()
    _fmha_window_fwd_kernel[(tg.grid_t, tg.grid_b * HKV * n_hg)](
        q, keys.k, keys.v, o, lse, or_placeholder(p.sinks, lse), or_placeholder(p.cu_seqlens, lse),
        or_placeholder(keys.cu, lse), or_placeholder(keys.lens, lse), or_placeholder(tg.tile_seq, lse),
        or_placeholder(tg.tile_tok, lse),
        q.stride(0), q.stride(1), q.stride(2), ks[0], ks[2], vs[0], vs[2],
        T, keys.k.shape[1], HQ, HKV, G, tg.n_seq, p.window, p.scale * LOG2E,
        STRIDE_KS=ks[1], STRIDE_VS=vs[1], HP=hp, N_HG=n_hg, BLOCK_T=block_t, BLOCK_M=cfg.block_m,
        BLOCK_K=window_keys(p.window, cfg.block_m, G, None if p.cu_seqlens is not None else T),
        BLOCK_D=min(D, cfg.block_d), BLOCK_DV=min(DV, cfg.block_dv), D=D, DV=DV,
        HAS_SINK=p.sinks is not None, HAS_KV_LENS=keys.lens is not None, IS_VARLEN=p.cu_seqlens is not None,
        WRITE_PARTIAL=p.partial, DOT_PRECISION=dot_precision(q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return o.view(B, T, HQ, DV), lse.view(B, T, HQ)
