"""Forward orchestration: the chunk plan, the intra stage on [B, T, ...] inputs and what a forward saves for its
backward. The stages' launchers live in their stage files (`intra_fwd` in intra.py, `state_fwd` in state.py,
`wy_recompute` in wy.py)."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F

from triton_kda.configs import capturing, cdiv
from triton_kda.intra import intra_fwd
from triton_kda.state import StateOut
from triton_kda.wy import IntraOut, wy_recompute


class ChunkPlan(NamedTuple):
    """Where every chunk lives. All sequences are laid end to end (fixed-length batches as B equal sequences)."""
    cu_seqlens: torch.Tensor     # [N + 1] int64, device
    chunk_indices: torch.Tensor  # [NT, 2] int32, device: (sequence, chunk within the sequence)
    chunk_offsets: torch.Tensor  # [N + 1] int64, device: index of each sequence's first chunk
    N: int
    NT: int
    lens: tuple                  # token count of each sequence (host ints; the intra-card CP planner reads them)


@functools.lru_cache(maxsize=64)
def _varlen_plan(seqlens: tuple, BT: int, device: torch.device) -> ChunkPlan:
    lens = torch.tensor(seqlens, dtype=torch.int64)
    nts = (lens + BT - 1) // BT
    seq = torch.repeat_interleave(torch.arange(len(seqlens)), nts)
    first = torch.cumsum(nts, 0) - nts
    local = torch.arange(int(nts.sum())) - first[seq]
    cu = torch.zeros(len(seqlens) + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(lens, 0)
    offs = torch.zeros(len(seqlens) + 1, dtype=torch.int64)
    offs[1:] = torch.cumsum(nts, 0)
    idx = torch.stack([seq, local], 1).to(torch.int32)
    return ChunkPlan(cu.to(device, non_blocking=True), idx.to(device, non_blocking=True),
                     offs.to(device, non_blocking=True), len(seqlens), int(nts.sum()), seqlens)


def _device_varlen_plan(cu_seqlens: torch.Tensor, seqlens: tuple, BT: int) -> ChunkPlan:
    """`_varlen_plan` built by device ops from the device copy of the boundaries (whose values the host copy gave
    `seqlens`): no host-to-device copy and no sync (sizes come from the host), so it can be captured in a CUDA graph,
    which then owns the tables."""
    dev = cu_seqlens.device
    cu = cu_seqlens.to(torch.int64)
    offs = F.pad(torch.cumsum((cu[1:] - cu[:-1] + BT - 1) // BT, 0), (1, 0))
    NT = sum((n + BT - 1) // BT for n in seqlens)
    chunks = torch.arange(NT, device=dev, dtype=torch.int64)
    seq = torch.searchsorted(offs[1:], chunks, right=True)
    idx = torch.stack([seq, chunks - offs[seq]], 1).to(torch.int32)
    return ChunkPlan(cu, idx, offs, len(seqlens), NT, seqlens)


def plan_chunks(B: int, T: int, BT: int, device: torch.device, seqlens_cpu: torch.Tensor | None,
                cu_seqlens: torch.Tensor | None = None) -> ChunkPlan:
    """Chunk plan from the CPU copy of cu_seqlens (varlen; cached by content) or from (B, T) (cached); no device sync.
    During CUDA-graph capture a varlen plan is built on the device from `cu_seqlens` (the device copy) instead of
    being copied from the host (a cached host plan could be freed while the graph still reads it)."""
    if seqlens_cpu is not None:
        lens = tuple((seqlens_cpu[1:] - seqlens_cpu[:-1]).tolist())
        if cu_seqlens is not None and capturing(device):
            return _device_varlen_plan(cu_seqlens, lens, BT)
        return _varlen_plan(lens, BT, device)
    if capturing(device):
        return _fixed_plan.__wrapped__(B, T, BT, device)
    return _fixed_plan(B, T, BT, device)


@functools.lru_cache(maxsize=64)
def _fixed_plan(B: int, T: int, BT: int, device: torch.device) -> ChunkPlan:
    """The plan of B sequences of T tokens, cached per signature: its six small device ops cost about 150 us of host
    time per call on an H100 machine (`docs/benchmarks/scripts/gpu_host_split.py` at a24d737). Built anew during
    CUDA-graph capture (the graph then owns its tables; a cached plan could be evicted while the graph still reads
    it)."""
    nt = cdiv(T, BT)
    ar = torch.arange(B * nt, device=device, dtype=torch.int32)
    return ChunkPlan(
        cu_seqlens=torch.arange(0, B * T + 1, T, device=device, dtype=torch.int64),
        chunk_indices=torch.stack([ar // nt, ar % nt], 1),
        chunk_offsets=torch.arange(0, B * nt + 1, nt, device=device, dtype=torch.int64),
        N=B,
        NT=B * nt,
        lens=(T,) * B,
    )


def intra_stage(q, k, v, g, beta, A_log, dt_bias, scale: float, plan: ChunkPlan, BT: int, flags: dict, *,
                store_aux: bool) -> IntraOut:
    """`intra_fwd` on [B, T, ...] inputs (flattened here), A_log / dt_bias in any shape, with chunk_kda's flags.

    fp32 inputs with store_aux (a backward may follow) take w, u, qg, kg and gl from `wy_recompute`, the kernel that
    the backward's recompute runs, instead of the intra kernel's own products: on an H100 the two compile fp32 products
    with Akk from registers and from shared memory and part ways by up to 4.8e-7 (docs/benchmarks/NOTES.md at a24d737,
    2026-11-25), so the recompute would not match the forward (and `disable_recompute`) bit for bit. 16-bit inputs
    match without it."""
    flat = [x.flatten(0, 1).contiguous() for x in (q, k, v, g)]
    A_log = A_log.reshape(-1) if A_log is not None else None
    dt_bias = dt_bias.reshape(-1) if dt_bias is not None else None
    via_wy = store_aux and q.dtype == torch.float32
    intra = intra_fwd(*flat, beta.flatten(0, 1).contiguous(), A_log, dt_bias, scale, plan, BT,
                      use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"],
                      use_gate_in_kernel=flags["use_gate_in_kernel"], lower_bound=flags["lower_bound"],
                      use_beta_sigmoid_in_kernel=flags["use_beta_sigmoid_in_kernel"],
                      allow_neg_eigval=flags["allow_neg_eigval"], store_aux=store_aux, wy_out=not via_wy)
    if via_wy:
        intra = wy_recompute(*flat, A_log, dt_bias, intra.Aqk, intra.rstd_q, intra.rstd_k, intra.beta, intra.Akk,
                             scale, plan, BT, use_gate_in_kernel=flags["use_gate_in_kernel"],
                             lower_bound=flags["lower_bound"],
                             use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"])
    return intra


def saved_intermediates(intra: IntraOut, st: StateOut, *, keep: bool, grad: bool) -> tuple:
    """What a forward saves for its backward: every intermediate with `keep` (disable_recompute; then h and v_new
    last), else, where a backward can follow, what its recompute starts from (Aqk, the row norms, beta, Akk)."""
    if keep:
        return (*intra, st.h, st.v_new)
    if grad:
        return (intra.Aqk, intra.rstd_q, intra.rstd_k, intra.beta, intra.Akk)
    return ()
