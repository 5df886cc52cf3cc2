"""Exact merge of partial attention results through their log-sum-exp, with an optional per-head sink:
`o = (sum_i e^{l_i} o_i) / (sum_i e^{l_i} + e^{sink_h})`, `lse = log(sum_i e^{l_i} + e^{sink_h})`.

One kernel serves both the public two-way merge (`fmha_merge`) and the combine step of split-KV (`merge_splits`):
input A is a stack of `NUM_A` partials, input B an optional second one.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from triton_kda.configs import cdiv, pow2_ceil


@triton.jit
def _fmha_merge_fwd_kernel(
    oa_ptr, la_ptr, ob_ptr, lb_ptr, out_ptr, lse_ptr, sink_ptr,
    n_rows, HQ, stride_oas, stride_las,
    DV: tl.constexpr, NUM_A: tl.constexpr, HAS_B: tl.constexpr, HAS_SINK: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """oa `[NUM_A, n_rows, DV]` (split stride `stride_oas`), la `[NUM_A, n_rows]` (stride `stride_las`), ob
    `[n_rows, DV]`, lb `[n_rows]`; rows are (b, t, h) flattened with h fastest, so the sink of row r is
    sink[r % HQ]. A part with lse = -inf weighs nothing (its o is not read into the sum)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_DV + tl.arange(0, BLOCK_DV)
    r_ok = rows < n_rows
    c_ok = cols < DV
    rows64 = rows.to(tl.int64)
    m = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    for i in range(NUM_A):
        m = tl.maximum(m, tl.load(la_ptr + i * stride_las + rows64, mask=r_ok, other=float("-inf")))
    if HAS_B:
        lb = tl.load(lb_ptr + rows64, mask=r_ok, other=float("-inf"))
        m = tl.maximum(m, lb)
    if HAS_SINK:
        sink = tl.load(sink_ptr + rows % HQ, mask=r_ok, other=float("-inf"))
        m = tl.maximum(m, sink)
    m_sub = tl.where(m == float("-inf"), 0.0, m)
    den = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_DV], dtype=tl.float32)
    o_offs = rows64[:, None] * DV + cols[None, :]
    for i in range(NUM_A):
        w = tl.exp(tl.load(la_ptr + i * stride_las + rows64, mask=r_ok, other=float("-inf")) - m_sub)
        part = tl.load(oa_ptr + i * stride_oas + o_offs, mask=(r_ok & (w > 0))[:, None] & c_ok[None, :], other=0.0)
        den += w
        acc += w[:, None] * part.to(tl.float32)
    if HAS_B:
        w = tl.exp(lb - m_sub)
        part = tl.load(ob_ptr + o_offs, mask=(r_ok & (w > 0))[:, None] & c_ok[None, :], other=0.0)
        den += w
        acc += w[:, None] * part.to(tl.float32)
    if HAS_SINK:
        den += tl.exp(sink - m_sub)
    has = den > 0
    den_safe = tl.where(has, den, 1.0)
    tl.store(out_ptr + o_offs, (acc / den_safe[:, None]).to(out_ptr.dtype.element_ty),
             mask=r_ok[:, None] & c_ok[None, :])
    if tl.program_id(1) == 0:
        tl.store(lse_ptr + rows64, tl.where(has, m_sub + tl.log(den_safe), float("-inf")), mask=r_ok)


def launch_merge(
    oa: torch.Tensor,
    la: torch.Tensor,
    ob: torch.Tensor | None,
    lb: torch.Tensor | None,
    hq: int,
    sinks: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """oa `[NUM_A, n_rows, DV]` contiguous, la `[NUM_A, n_rows]` fp32 contiguous; ob `[n_rows, DV]` and lb
    `[n_rows]` contiguous or None. Returns o `[n_rows, DV]` (out_dtype) and lse `[n_rows]` fp32."""
    num_a, n_rows, dv = oa.shape
    out = torch.empty(n_rows, dv, dtype=out_dtype, device=oa.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=oa.device)
    block_dv = min(pow2_ceil(dv), 128)
    block_r = 16
    grid = (cdiv(n_rows, block_r), cdiv(dv, block_dv))
    _fmha_merge_fwd_kernel[grid](
        oa, la, ob if ob is not None else oa, lb if lb is not None else la, out, lse,
        sinks if sinks is not None else la,
        n_rows, hq, oa.stride(0), la.stride(0),
        DV=dv, NUM_A=num_a, HAS_B=ob is not None, HAS_SINK=sinks is not None, BLOCK_R=block_r, BLOCK_DV=block_dv,
        num_warps=4,
    )
    return out, lse


def merge_splits(
    o: torch.Tensor, lse: torch.Tensor, hq: int, sinks: torch.Tensor | None, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine split-KV partials: o `[NUM_SPLITS, n_rows, DV]` fp32, lse `[NUM_SPLITS, n_rows]` fp32, sinks `[HQ]`
    fp32 or None. Returns o `[n_rows, DV]` (out_dtype) and lse `[n_rows]` fp32."""
    return launch_merge(o, lse, None, None, hq, sinks, out_dtype)
