"""Intra-card context parallelism: the state recurrence of long sequences split into pieces run in parallel.

A chunk's update is affine in the state, S <- A_c S + kg^T u with A_c = diag(2^G_last) - kg^T w, so a piece of
chunks maps its start state to its end state as S_out = M S_in + E (KDA_SPEC.md). Forward:
1. `_kda_state_cp_fwd_map_kernel`, parallel over (columns, pieces, v-heads): M's columns by the recurrence started
   from the identity with u = 0, E by the recurrence started from 0 (from the initial state on a sequence's first
   piece, which then needs no M);
2. `_kda_state_cp_fwd_chain_kernel`, parallel over (V blocks, sequences, v-heads): S_start of every piece by
   chaining the maps in fp32;
3. the serial kernel (`state._kda_state_fwd_kernel`) over the pieces as if they were sequences, each from its
   S_start: o, h, v_new and the per-piece end states come out as on the serial path.
Backward, the same on the reverse recurrence dS <- A_c^T dS + (qg^T - w^T Aqk^T) do: per piece dS_start =
M^T dS_end + F (`_kda_state_cp_bwd_map_kernel`, the last piece of a sequence starts from dht and needs no M^T),
chained from the last piece back (`_kda_state_cp_bwd_chain_kernel`), then `state._kda_state_bwd_kernel` over the
pieces from their dS_end.

The planner (`plan_pieces`) decides per call whether and how finely to split, from the chunk counts, the number of
programs the serial path would launch and the SM count; only sequences longer than one piece are split.
Deterministic: no atomics, every sum in a fixed order.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from triton_kda._jit import (
    _dot,
    _finite_or_zero,
    _load_pair,
    _op,
    _pair_dot,
    _pair_tdot,
    _row_factors,
    _split16_cols,
    _state_offsets,
)
from triton_kda.configs import _kpad, arch_of, capturing, cdiv, cp_config, sm_count, state_config, state_narrow
from triton_kda.launch import launch_kernel

ENV_MODE = "TRITON_KDA_INTRACARD_CP"
ENV_PIECE_CHUNKS = "TRITON_KDA_INTRACARD_CP_CHUNKS"
ENV_MAP_CHUNKS = "TRITON_KDA_CP_MAP_CHUNKS"  # piece length of the maps a rank exports under CP across ranks (cp.py)

# planner cost model, in units of one chunk step of the serial kernel by one program (not tuned beyond one H100 run)
_PIECE_CHUNKS = (8, 16, 32, 64, 128, 256, 512)   # candidate piece lengths, in chunks
_PROGRAMS_PER_SM = 2    # state programs resident per SM that still speed each other up (latency-bound loop)
_MAP_STEP = 2 / 3       # a map step does two of the serial step's three products
_CHAIN_STEP = 1.0       # one [K, K] x [K, BV] fp32 product per piece, plus loading M
_EXTRA_LAUNCHES = 4.0   # the map and chain launches
_MIN_GAIN = 1.25        # split only where the model predicts at least this speed-up
_MAX_FILL = 1 / 6       # ... and where one sequence's serial programs (HV x V blocks) fill at most this share of the
                        # slots: the model ignores bandwidth, and at B1 H32 (64 programs, 132-SM H200) CP lost 9% / 7%
                        # fwd+bwd at T8192 / T32768 (docs/benchmarks/NOTES.md at a24d737, 7bc5e02); at B1 H8 it gained
                        # 1.56x forward. B1 H16 (64 programs of 32-wide V blocks, `configs.state_narrow`) stays serial


class PiecePlan(NamedTuple):
    """Pieces: runs of whole chunks of one sequence, laid out like `ChunkPlan`'s sequences (P pieces, N sequences,
    every sequence at least one piece, empty sequences one empty piece)."""
    cu_seqlens: torch.Tensor     # [P + 1] int64: token boundaries of the pieces
    chunk_offsets: torch.Tensor  # [P + 1] int64: global index of each piece's first chunk
    piece_seq: torch.Tensor      # [P] int32: sequence of each piece
    seq_pieces: torch.Tensor     # [N + 1] int64: first piece of each sequence
    fwd_maps: torch.Tensor       # [P - N] int32: pieces followed by another piece (map j of piece p: j = p - n)
    bwd_maps: torch.Tensor       # [P - N] int32: pieces after another piece (map j of piece p: j = p - n - 1)
    first: torch.Tensor          # [N] int64: first piece of each sequence
    last: torch.Tensor           # [N] int64: last piece of each sequence
    N: int                       # P, the number of pieces (the state kernels run them as sequences)
    NM: int                      # P - N, the number of piece maps


def _cost_serial(nc: tuple, programs_per_chunk: int, slots: int) -> float:
    return max(max(nc), sum(nc) * programs_per_chunk / slots)


def _cost_cp(nc: tuple, L: int, HV: int, nvb: int, nkb: int, neb: int, slots: int) -> float:
    pieces = [max(1, (n + L - 1) // L) for n in nc]
    split = sum(p > 1 for p in pieces)
    maps = sum(pieces) - len(nc)
    map_programs = HV * (maps * neb + (maps - split) * nkb)
    t_map = max(L, map_programs * L / slots) * _MAP_STEP
    t_main = max(min(max(nc), L), sum(nc) * HV * nvb / slots)
    return t_map + max(pieces) * _CHAIN_STEP + t_main + _EXTRA_LAUNCHES


@functools.lru_cache(maxsize=256)
def _piece_chunks(nchunks: tuple, HV: int, serial_nvb: int, nvb: int, nkb: int, neb: int, slots: int,
                  mode: str, forced: int) -> int:
    """Piece length in chunks, or 0 for no split. nchunks: chunk count of each sequence; serial_nvb: V blocks of the
    serial kernel over the whole sequences (narrower where they are few, `configs.state_narrow`); nvb: those of the
    main pass over the pieces; nkb / neb: column blocks of M / E in the map kernels; slots: SMs x resident
    programs. Plain Python on host ints (no tensors: the op's fake implementation runs it under FakeTensorMode)."""
    if mode == "0" or not nchunks or max(nchunks) < 2:
        return 0
    longest = max(nchunks)
    if mode == "auto" and not forced and HV * serial_nvb > slots * _MAX_FILL:
        return 0
    if forced:
        lengths = (forced,) if forced < longest else ()
    else:
        lengths = tuple(L for L in _PIECE_CHUNKS if L < longest) or (max(1, longest // 2),)
    if not lengths:
        return 0
    best = min(lengths, key=lambda L: _cost_cp(nchunks, L, HV, nvb, nkb, neb, slots))
    if mode == "1":
        return best
    gain = _cost_serial(nchunks, HV * serial_nvb, slots) / _cost_cp(nchunks, best, HV, nvb, nkb, neb, slots)
    return best if gain >= _MIN_GAIN else 0


@functools.lru_cache(maxsize=64)
def _piece_plan(lens: tuple, BT: int, L: int, device: torch.device) -> PiecePlan:
    """Tables of the pieces of L chunks (the last piece of a sequence takes the remainder); cached by content."""
    seq_len = torch.tensor(lens, dtype=torch.int64)
    nc = (seq_len + BT - 1) // BT
    pieces = torch.clamp((nc + L - 1) // L, min=1)
    N, P = len(lens), int(pieces.sum())
    seq = torch.repeat_interleave(torch.arange(N), pieces)
    seq_pieces = torch.zeros(N + 1, dtype=torch.int64)
    seq_pieces[1:] = torch.cumsum(pieces, 0)
    local = torch.arange(P) - seq_pieces[seq]
    seq_bos = torch.cumsum(seq_len, 0) - seq_len
    seq_chunk = torch.cumsum(nc, 0) - nc
    cu = torch.empty(P + 1, dtype=torch.int64)
    cu[:-1] = seq_bos[seq] + torch.minimum(local * L * BT, seq_len[seq])
    cu[-1] = int(seq_len.sum())
    offs = torch.empty(P + 1, dtype=torch.int64)
    offs[:-1] = seq_chunk[seq] + torch.minimum(local * L, nc[seq])
    offs[-1] = int(nc.sum())
    first, last = seq_pieces[:-1], seq_pieces[1:] - 1
    is_first = torch.zeros(P, dtype=torch.bool)
    is_first[first] = True
    is_last = torch.zeros(P, dtype=torch.bool)
    is_last[last] = True
    ar = torch.arange(P, dtype=torch.int32)

    def dev(x: torch.Tensor) -> torch.Tensor:
        return x.to(device, non_blocking=True)

    return PiecePlan(dev(cu), dev(offs), dev(seq.to(torch.int32)), dev(seq_pieces), dev(ar[~is_last]),
                     dev(ar[~is_first]), dev(first), dev(last), P, P - N)


def piece_chunks(lens: tuple, BT: int, HV: int, K: int, V: int, elem_size: int, device: torch.device) -> int:
    """Piece length in chunks that `plan_pieces` splits the sequences into, or 0 where the serial path runs; host
    only (no tensors are built, no device sync). Arguments and environment as `plan_pieces`."""
    mode = os.environ.get(ENV_MODE, "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"{ENV_MODE} must be auto, 0 or 1, got {mode!r}")
    forced_env = os.environ.get(ENV_PIECE_CHUNKS, "").strip()
    if forced_env and not (forced_env.isdigit() and int(forced_env) > 0):
        raise ValueError(f"{ENV_PIECE_CHUNKS} must be a positive int (piece length in chunks), got {forced_env!r}")
    if mode == "0":
        return 0
    arch = arch_of(device)
    BC = cp_config(arch, K, V, elem_size).BC
    nchunks = tuple((n + BT - 1) // BT for n in lens)
    serial_BV = state_config(arch, K, V, elem_size, state_narrow(len(lens) * HV, V, device)).BV
    return _piece_chunks(nchunks, HV, cdiv(V, serial_BV), cdiv(V, state_config(arch, K, V, elem_size).BV),
                         cdiv(K, BC), cdiv(V, BC), sm_count(device) * _PROGRAMS_PER_SM, mode, int(forced_env or 0))


@functools.lru_cache(maxsize=256)
def _map_piece_chunks(nchunks: tuple, programs: int, slots: int) -> int:
    """Piece length (chunks) that minimises the time of the maps of the sequences `nchunks` and of composing them:
    max(longest piece, all map programs' steps / slots) map steps plus one composition step per piece of the
    longest sequence; `programs`: map programs per piece (v-heads x column blocks of [M | E])."""
    def cost(L: int) -> float:
        pieces = [max(1, (n + L - 1) // L) for n in nchunks]
        steps = max(max(min(n, L) for n in nchunks), sum(pieces) * programs * L / slots)
        return steps * _MAP_STEP + (max(pieces) - 1) * 2 * _CHAIN_STEP  # a composition step: [K, K] x [K, K + V]
    longest = max(nchunks)
    return min((*(L for L in _PIECE_CHUNKS if L < longest), longest), key=cost)


def map_piece_chunks(nchunks: tuple, HV: int, K: int, V: int, elem_size: int, device: torch.device) -> int:
    """Piece length in chunks of the maps that a rank exports under CP across ranks (`cp.py`: the [M | E] or
    [M^T | F] of whole local sequences): split so that their map programs fill the GPU, then composed in fp32
    (`_kda_state_cp_compose_kernel`). nchunks: chunk count of each exported sequence (host ints, at least one);
    `TRITON_KDA_CP_MAP_CHUNKS` = n fixes the length (a length >= the sequence keeps it whole). Host only."""
    forced = os.environ.get(ENV_MAP_CHUNKS, "").strip()
    if forced:
        if not (forced.isdigit() and int(forced) > 0):
            raise ValueError(f"{ENV_MAP_CHUNKS} must be a positive int (piece length in chunks), got {forced!r}")
        return int(forced)
    if max(nchunks) < 2:
        return 1
    cfg = cp_config(arch_of(device), K, V, elem_size)
    programs = HV * (cdiv(K, cfg.BC) + cdiv(V, cfg.BC))
    return _map_piece_chunks(tuple(nchunks), programs, sm_count(device) * _PROGRAMS_PER_SM)


def _device_piece_plan(seqs, lens: tuple, BT: int, L: int) -> PiecePlan:
    """`_piece_plan` built by device ops from the sequences' chunk plan `seqs` (a `ChunkPlan` on the device; `lens`
    its host token counts give the sizes): no host-to-device copy and no sync, so it can be captured in a CUDA graph,
    which then owns the tables."""
    dev = seqs.cu_seqlens.device
    nc_host = [(n + BT - 1) // BT for n in lens]
    N, P = len(lens), sum(max(1, (c + L - 1) // L) for c in nc_host)
    seq_bos, seq_chunk = seqs.cu_seqlens[:-1], seqs.chunk_offsets[:-1]
    seq_len, nc = seqs.cu_seqlens[1:] - seq_bos, seqs.chunk_offsets[1:] - seq_chunk
    pieces = torch.clamp((nc + L - 1) // L, min=1)
    seq_pieces = F.pad(torch.cumsum(pieces, 0), (1, 0))
    ar = torch.arange(P, device=dev, dtype=torch.int64)
    seq = torch.searchsorted(seq_pieces[1:], ar, right=True)
    local = ar - seq_pieces[seq]
    cu = torch.cat([seq_bos[seq] + torch.minimum(local * L * BT, seq_len[seq]), seqs.cu_seqlens[-1:]])
    offs = torch.cat([seq_chunk[seq] + torch.minimum(local * L, nc[seq]), seqs.chunk_offsets[-1:]])
    # map j of sequence n is its piece j - maps_before[n] (forward: every piece but the last; backward: but the first)
    maps_before = F.pad(torch.cumsum(pieces - 1, 0), (1, 0))
    j = torch.arange(P - N, device=dev, dtype=torch.int64)
    n = torch.searchsorted(maps_before[1:], j, right=True)
    fwd_maps = seq_pieces[n] + j - maps_before[n]
    i32 = torch.int32
    return PiecePlan(cu, offs, seq.to(i32), seq_pieces, fwd_maps.to(i32), (fwd_maps + 1).to(i32), seq_pieces[:-1],
                     seq_pieces[1:] - 1, P, P - N)


def plan_pieces(lens: tuple, BT: int, HV: int, K: int, V: int, elem_size: int, device: torch.device,
                seqs=None, min_chunks: int = 0) -> PiecePlan | None:
    """Piece plan for one call, or None where the serial path runs (no sequence split).

    lens: token count of each sequence (host ints); elem_size: bytes per element of the intermediates (2 or 4), which
    picks the launch blocks the cost model counts. `TRITON_KDA_INTRACARD_CP`
    = `auto` (default: split where the cost model predicts a gain), `0` (never), `1` (always, wherever a sequence is
    longer than one piece); `TRITON_KDA_INTRACARD_CP_CHUNKS` = n fixes the piece length to n chunks. Never syncs
    with the device (the SM count is read once per device). seqs: the sequences' `ChunkPlan`; during CUDA-graph
    capture the tables are built from it on the device instead of copied from the host. min_chunks: the shortest
    piece the planner may choose (a faster serial pass than the one its cost model counts; not applied to a forced
    length)."""
    L = piece_chunks(lens, BT, HV, K, V, elem_size, device)
    if not L:
        return None
    if not os.environ.get(ENV_PIECE_CHUNKS, "").strip():
        L = max(L, min_chunks)
    if seqs is not None and capturing(device):
        return _device_piece_plan(seqs, lens, BT, L)
    return _piece_plan(lens, BT, L, device)


ENV_CKPT_CHUNKS = "TRITON_KDA_STATE_CKPT_CHUNKS"
_CKPT_CHUNKS = (64, 32, 16, 8, 4)   # candidate checkpoint spacings, in chunks (the largest that balances is taken)


class Checkpoints(NamedTuple):
    """Where a training forward keeps its state every L chunks, from which its backward recomputes h and v_new in
    parallel (`state.state_fwd` with `start`)."""
    pieces: PiecePlan          # pieces of L chunks of every sequence; piece p starts from kept state p
    slots: torch.Tensor        # [NT + P] int32: kept-state index of each chunk that starts a non-empty piece, else -1


@functools.lru_cache(maxsize=256)
def _ckpt_chunks(nchunks: tuple, programs_per_seq: int, slots: int) -> int:
    """Checkpoint spacing in chunks (0: none) for sequences of `nchunks` chunks whose serial pass runs
    `programs_per_seq` programs each on `slots` resident programs; plain Python, as `_piece_chunks`."""
    if not nchunks or max(nchunks) <= min(_CKPT_CHUNKS):
        return 0
    fill = sum(nchunks) * programs_per_seq / slots   # chunk steps per slot once every slot is busy
    L = next((L for L in _CKPT_CHUNKS if 2 * L <= fill and L < max(nchunks)), min(_CKPT_CHUNKS))
    return L if _cost_serial(nchunks, programs_per_seq, slots) >= _MIN_GAIN * max(min(L, max(nchunks)), fill) else 0


def checkpoint_chunks(lens: tuple, BT: int, HV: int, K: int, V: int, elem_size: int, device: torch.device) -> int:
    """Chunks between the states a training forward keeps for its backward (0: none; the backward then reruns the
    forward's state pass, CP maps included). Where the forward splits into intra-card CP pieces, their length (the
    recompute then runs those pieces from their kept start states, without the maps); else, where the serial
    recompute would leave slots idle (`_cost_serial` against a full GPU by at least `_MIN_GAIN`), the largest spacing
    whose pieces still fill the slots twice over. Host only. `TRITON_KDA_STATE_CKPT_CHUNKS` = n fixes the spacing (0:
    never keep states)."""
    forced = os.environ.get(ENV_CKPT_CHUNKS, "").strip()
    if forced and not forced.isdigit():
        raise ValueError(f"{ENV_CKPT_CHUNKS} must be a non-negative int (checkpoint spacing in chunks, 0: none), got "
                         f"{forced!r}")
    nchunks = tuple((n + BT - 1) // BT for n in lens)
    if forced:
        L = int(forced)
        return L if L and nchunks and max(nchunks) > L else 0
    L = piece_chunks(lens, BT, HV, K, V, elem_size, device)
    if L:
        return L
    BV = state_config(arch_of(device), K, V, elem_size, state_narrow(len(lens) * HV, V, device)).BV
    # 64-wide blocks (16-bit inputs, three stages) take one program per SM: counted as two, bf16 B2 T8192 H32 kept
    # states every 16 chunks and ran fwd+bwd x1.011 slower (H100, docs/benchmarks/runs/2026-11-26_kept_states)
    per_sm = 1 if BV >= 64 else _PROGRAMS_PER_SM
    return _ckpt_chunks(nchunks, HV * cdiv(V, BV), sm_count(device) * per_sm)


def _slot_table(pieces: PiecePlan, NT: int) -> torch.Tensor:
    """[NT + P] int32: p at the first chunk of each non-empty piece p, -1 elsewhere among the first NT entries (the
    kernel reads only those); entry NT + p takes empty piece p's write, so no entry is written twice. Device ops only
    (no sync)."""
    starts = pieces.chunk_offsets[:-1]
    nonempty = pieces.cu_seqlens[1:] > pieces.cu_seqlens[:-1]
    ar = torch.arange(pieces.N, device=starts.device)
    slots = torch.full((NT + pieces.N,), -1, dtype=torch.int32, device=starts.device)
    return slots.scatter_(0, torch.where(nonempty, starts, NT + ar), ar.to(torch.int32))


@functools.lru_cache(maxsize=64)
def _checkpoint_plan(lens: tuple, BT: int, L: int, NT: int, device: torch.device) -> Checkpoints:
    pieces = _piece_plan(lens, BT, L, device)
    return Checkpoints(pieces, _slot_table(pieces, NT))


def plan_checkpoints(seqs, BT: int, L: int) -> Checkpoints:
    """The `Checkpoints` of the sequences' `ChunkPlan` `seqs` every L chunks; cached by content, built on the device
    during CUDA-graph capture (the graph then owns the tables)."""
    if capturing(seqs.cu_seqlens.device):
        pieces = _device_piece_plan(seqs, seqs.lens, BT, L)
        return Checkpoints(pieces, _slot_table(pieces, seqs.NT))
    return _checkpoint_plan(seqs.lens, BT, L, seqs.NT, seqs.cu_seqlens.device)


@triton.jit
def _piece_coords(cu_seqlens, chunk_offsets, piece_seq, map_pieces, i_j):
    """Piece p of map i_j, its sequence n, first token (int64), token count (int32) and first global chunk."""
    p = tl.load(map_pieces + i_j).to(tl.int64)
    i_n = tl.load(piece_seq + p).to(tl.int64)
    bos = tl.load(cu_seqlens + p).to(tl.int64)
    T = (tl.load(cu_seqlens + p + 1).to(tl.int64) - bos).to(tl.int32)
    c_base = tl.load(chunk_offsets + p).to(tl.int64)
    return p, i_n, bos, T, c_base


@triton.jit
def _map_columns(i_c, NKB: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
                 V_FIRST: tl.constexpr):
    """Column block i_c of [M | E]: whether it is an E block, its row/column offsets and mask, the offsets of
    those columns in a [K, V] state ([V, K] if V_FIRST; E blocks only) and in one [K, K + V] map."""
    is_e = i_c >= NKB
    o_k = tl.arange(0, BK)
    o_c = (i_c - is_e.to(tl.int32) * NKB) * BC + tl.arange(0, BC)
    m_kc = (o_k < K)[:, None] & (o_c < tl.where(is_e, V, K))[None, :]
    off_state = _state_offsets(o_k, o_c, K, V, V_FIRST)
    off_map = o_k[:, None] * (K + V) + is_e.to(tl.int32) * K + o_c[None, :]
    return is_e, o_k, o_c, m_kc, off_state, off_map


@triton.jit
def _kda_state_cp_fwd_map_kernel(
    kg, w, u, gl, rs, h0, maps,
    cu_seqlens, chunk_offsets, piece_seq, seq_pieces, map_pieces,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
    NKB: tl.constexpr, HAS_H0: tl.constexpr, V_FIRST: tl.constexpr, IS_BF16: tl.constexpr, PREC: tl.constexpr,
    PAIRS: tl.constexpr, PREFETCH: tl.constexpr,
):
    """Map (M, E) of piece map_pieces[j] over its chunks, S <- 2^G_last S + kg^T (u - w S):
    kg, w: [TT, HV, K]; u: [TT, HV, V]; gl: [NT, HV, K] fp32 (log2 units); h0: [N, HV, K, V] fp32 ([N, HV, V, K] if
    V_FIRST); maps: [NM, HV, K, K + V] fp32, columns [0, K) M (from the identity, u = 0), [K, K + V) E (from 0, or
    from h0 on a sequence's first piece, whose M is not needed and not written). Grid (NKB + cdiv(V, BC), NM, HV).
    With PAIRS, kg and w are fp16 pairs with row factors rs [TT, HV] (`wy.IntraOut`)."""
    i_c, i_j, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    p, i_n, bos, T, c_base = _piece_coords(cu_seqlens, chunk_offsets, piece_seq, map_pieces, i_j)
    first = tl.load(seq_pieces + i_n) == p
    is_e, o_k, o_c, m_kc, off_state, off_map = _map_columns(i_c, NKB, K, V, BK, BC, V_FIRST)
    if first & (i_c < NKB):
        return
    b_S = tl.where(is_e, 0.0, (o_k[:, None] == o_c[None, :]).to(tl.float32))
    if HAS_H0:
        b_S += tl.load(h0 + (i_n * HV + i_hv) * K * V + off_state, mask=m_kc & first & is_e, other=0.0)
    o_t = tl.arange(0, BT)
    for i_t in range(tl.cdiv(T, BT)):
        t0 = i_t * BT
        if PAIRS:
            b_rs = _row_factors(rs, bos, i_hv, T, t0, HV, BT)
            w_hi, w_lo = _load_pair(w, bos, i_hv, T, t0, HV, K, BT, BK)
            s_hi, s_lo, s_dn = _split16_cols(b_S)
            b_vn = -(_pair_dot(w_hi, w_lo, s_hi, s_lo, s_dn) * b_rs[:, None])
            if is_e:
                p_u = u + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                b_vn += tl.load(p_u, mask=((t0 + o_t) < T)[:, None] & (o_c < V)[None, :], other=0.0).to(tl.float32)
            b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_S *= tl.exp2(b_gl)[:, None]
            kg_hi, kg_lo = _load_pair(kg, bos, i_hv, T, t0, HV, K, BT, BK)
            v_hi, v_lo, v_dn = _split16_cols(_finite_or_zero(b_vn) * b_rs[:, None])
            b_S += _pair_dot(tl.trans(kg_hi), tl.trans(kg_lo), v_hi, v_lo, v_dn)
        else:  # 16-bit inputs, or fp32 ones whose kg, w are plain
            if PREFETCH:  # every load unconditional (u masked off in M blocks): the chunk loop prefetches them
                p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_u = u + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                b_w = tl.load(p_w, boundary_check=(0, 1))
                b_kg = tl.load(p_kg, boundary_check=(0, 1))
                b_u = tl.load(p_u, mask=((t0 + o_t) < T)[:, None] & ((o_c < V) & is_e)[None, :], other=0.0)
                b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
                b_vn = b_u.to(tl.float32) - _dot(_op(b_w, IS_BF16), _op(b_S, IS_BF16), None, PREC)
                b_S *= tl.exp2(b_gl)[:, None]
                b_S += _dot(tl.trans(_op(b_kg, IS_BF16)), _op(_finite_or_zero(b_vn), IS_BF16), None, PREC)
            else:
                p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                b_vn = -_dot(_op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16), _op(b_S, IS_BF16), None, PREC)
                if is_e:
                    p_u = u + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                    b_vn += tl.load(p_u, mask=((t0 + o_t) < T)[:, None] & (o_c < V)[None, :],
                                    other=0.0).to(tl.float32)
                b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
                b_S *= tl.exp2(b_gl)[:, None]
                b_S += _dot(tl.trans(_op(tl.load(p_kg, boundary_check=(0, 1)), IS_BF16)),
                            _op(_finite_or_zero(b_vn), IS_BF16), None, PREC)
    tl.store(maps + (i_j * HV + i_hv).to(tl.int64) * K * (K + V) + off_map, b_S, mask=m_kc)


@triton.jit
def _kda_state_cp_bwd_map_kernel(
    qg, kg, w, Aqk, gl, rs, do, dht, maps,
    cu_seqlens, chunk_offsets, piece_seq, seq_pieces, map_pieces,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
    NKB: tl.constexpr, HAS_DHT: tl.constexpr, V_FIRST: tl.constexpr, IS_BF16: tl.constexpr, PREC: tl.constexpr,
    PAIRS: tl.constexpr, PREFETCH: tl.constexpr,
):
    """Reverse map (M^T, F) of piece map_pieces[j], dS_start = M^T dS_end + F, over its chunks last to first:
    dv_new = Aqk^T do + kg dS;  dS <- 2^G_last dS + qg^T do - w^T dv_new.
    qg, kg, w: [TT, HV, K]; Aqk: [TT, HV, BT]; do: [TT, HV, V]; gl: [NT, HV, K] fp32; dht: [N, HV, K, V] fp32
    ([N, HV, V, K] if V_FIRST); maps: [NM, HV, K, K + V] fp32, columns [0, K) M^T (from the identity, do = 0),
    [K, K + V) F (from 0, or from dht on a sequence's last piece, whose M^T is not needed and not written).
    Grid (NKB + cdiv(V, BC), NM, HV). With PAIRS, qg, kg and w are fp16 pairs with row factors rs [TT, HV]."""
    i_c, i_j, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    p, i_n, bos, T, c_base = _piece_coords(cu_seqlens, chunk_offsets, piece_seq, map_pieces, i_j)
    last = tl.load(seq_pieces + i_n + 1) - 1 == p
    is_e, o_k, o_c, m_kc, off_state, off_map = _map_columns(i_c, NKB, K, V, BK, BC, V_FIRST)
    if last & (i_c < NKB):
        return
    b_dS = tl.where(is_e, 0.0, (o_k[:, None] == o_c[None, :]).to(tl.float32))
    if HAS_DHT:
        b_dS += tl.load(dht + (i_n * HV + i_hv) * K * V + off_state, mask=m_kc & last & is_e, other=0.0)
    o_t = tl.arange(0, BT)
    NC = tl.cdiv(T, BT)
    for i_r in range(NC):
        i_t = NC - 1 - i_r
        t0 = i_t * BT
        if PAIRS:
            b_rs = _row_factors(rs, bos, i_hv, T, t0, HV, BT)
            kg_hi, kg_lo = _load_pair(kg, bos, i_hv, T, t0, HV, K, BT, BK)
            s_hi, s_lo, s_dn = _split16_cols(b_dS)
            b_dvn = _pair_dot(kg_hi, kg_lo, s_hi, s_lo, s_dn) * b_rs[:, None]
            b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
            b_dS *= tl.exp2(b_gl)[:, None]
            if is_e:
                p_do = do + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                b_do = tl.load(p_do, mask=((t0 + o_t) < T)[:, None] & (o_c < V)[None, :], other=0.0).to(tl.float32)
                p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT),
                                        (1, 0))
                b_dvn += _dot(tl.trans(tl.load(p_A, boundary_check=(0, 1))), b_do, None, PREC)
                b_dS += _pair_tdot(qg, b_rs, b_do, bos, i_hv, T, t0, HV, K, BT, BK)
            b_dS -= _pair_tdot(w, b_rs, b_dvn, bos, i_hv, T, t0, HV, K, BT, BK)
        else:  # 16-bit inputs, or fp32 ones whose qg, kg, w are plain
            if PREFETCH:  # every load unconditional (do, Aqk, qg masked off in M^T blocks): prefetched
                m_t = (t0 + o_t) < T
                p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_do = do + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                p_A = Aqk + ((bos + t0 + o_t)[:, None] * HV + i_hv) * BT + o_t[None, :]
                p_qg = qg + ((bos + t0 + o_t)[:, None] * HV + i_hv) * K + o_k[None, :]
                b_kg = tl.load(p_kg, boundary_check=(0, 1))
                b_w = tl.load(p_w, boundary_check=(0, 1))
                b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
                b_do = tl.load(p_do, mask=m_t[:, None] & ((o_c < V) & is_e)[None, :], other=0.0)
                b_A = tl.load(p_A, mask=(m_t & is_e)[:, None], other=0.0)
                b_qg = tl.load(p_qg, mask=(m_t & is_e)[:, None] & (o_k < K)[None, :], other=0.0)
                b_dvn = _dot(_op(b_kg, IS_BF16), _op(b_dS, IS_BF16), None, PREC)
                b_dS *= tl.exp2(b_gl)[:, None]
                if is_e:
                    b_dvn += _dot(tl.trans(_op(b_A, IS_BF16)), _op(b_do, IS_BF16), None, PREC)
                    b_dS += _dot(tl.trans(_op(b_qg, IS_BF16)), _op(b_do, IS_BF16), None, PREC)
                b_dS -= _dot(tl.trans(_op(b_w, IS_BF16)), _op(b_dvn, IS_BF16), None, PREC)
            else:
                p_kg = tl.make_block_ptr(kg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                p_w = tl.make_block_ptr(w + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK), (1, 0))
                b_dvn = _dot(_op(tl.load(p_kg, boundary_check=(0, 1)), IS_BF16), _op(b_dS, IS_BF16), None, PREC)
                b_gl = tl.load(gl + ((c_base + i_t) * HV + i_hv) * K + o_k, mask=o_k < K, other=0.0)
                b_dS *= tl.exp2(b_gl)[:, None]
                if is_e:
                    p_do = do + ((bos + t0 + o_t)[:, None] * HV + i_hv) * V + o_c[None, :]
                    b_do = _op(tl.load(p_do, mask=((t0 + o_t) < T)[:, None] & (o_c < V)[None, :], other=0.0),
                               IS_BF16)
                    p_A = tl.make_block_ptr(Aqk + (bos * HV + i_hv) * BT, (T, BT), (HV * BT, 1), (t0, 0), (BT, BT),
                                            (1, 0))
                    p_qg = tl.make_block_ptr(qg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, 0), (BT, BK),
                                             (1, 0))
                    b_dvn += _dot(tl.trans(_op(tl.load(p_A, boundary_check=(0, 1)), IS_BF16)), b_do, None, PREC)
                    b_dS += _dot(tl.trans(_op(tl.load(p_qg, boundary_check=(0, 1)), IS_BF16)), b_do, None, PREC)
                b_dS -= _dot(tl.trans(_op(tl.load(p_w, boundary_check=(0, 1)), IS_BF16)), _op(b_dvn, IS_BF16), None,
                             PREC)
    tl.store(maps + (i_j * HV + i_hv).to(tl.int64) * K * (K + V) + off_map, b_dS, mask=m_kc)


@triton.jit
def _chain_coords(seq_pieces, i_n, i_v, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                  V_FIRST: tl.constexpr):
    """First and end piece (int64) of sequence i_n; offsets and mask of V block i_v in a [K, V] state ([V, K] if
    V_FIRST) and of its E/F part in one [K, K + V] map."""
    s = tl.load(seq_pieces + i_n).to(tl.int64)
    e = tl.load(seq_pieces + i_n + 1).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    off_kv = _state_offsets(o_k, o_v, K, V, V_FIRST)
    off_e = o_k[:, None] * (K + V) + K + o_v[None, :]
    return s, e, m_kv, off_kv, off_e


@triton.jit
def _chain_step(map_j, state, b_E, i_v, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                BKC: tl.constexpr, V_FIRST: tl.constexpr):
    """E + M S in fp32 (IEEE products) for V block i_v: M is the [K, K] part of map_j ([K, K + V]); S is read back
    from `state` ([K, V], or [V, K] if V_FIRST; this program has just stored it) in blocks of BKC rows, so no
    [K, K] tile is ever held."""
    tl.debug_barrier()
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    b_S = b_E
    for kc in tl.static_range(0, BK, BKC):
        o_kc = kc + tl.arange(0, BKC)
        b_M = tl.load(map_j + o_k[:, None] * (K + V) + o_kc[None, :], mask=(o_k < K)[:, None] & (o_kc < K)[None, :],
                      other=0.0)
        off = _state_offsets(o_kc, o_v, K, V, V_FIRST)
        b_Sk = tl.load(state + off, mask=(o_kc < K)[:, None] & (o_v < V)[None, :], other=0.0)
        b_S += tl.dot(b_M, b_Sk, input_precision="ieee")
    return b_S


@triton.jit
def _kda_state_cp_fwd_chain_kernel(
    maps, h0, init, seq_pieces,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BKC: tl.constexpr,
    HAS_H0: tl.constexpr, V_FIRST: tl.constexpr,
):
    """Start state of every piece of sequence n, in fp32: S = h0[n] (or 0); per piece p, init[p] = S, then
    S <- M_j S + E_j (S <- E_j on the first piece, whose E already holds h0). maps: [NM, HV, K, K + V] fp32 from
    `_kda_state_cp_fwd_map_kernel`; h0: [N, HV, K, V], init: [P, HV, K, V] fp32 ([.., V, K] if V_FIRST).
    Grid (cdiv(V, BV), N, HV)."""
    i_v, i_n, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s, e, m_kv, off_kv, off_e = _chain_coords(seq_pieces, i_n, i_v, K, V, BK, BV, V_FIRST)
    b_S = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        b_S += tl.load(h0 + (i_n * HV + i_hv) * K * V + off_kv, mask=m_kv, other=0.0)
    for p in range(s, e):
        p_S = init + (p * HV + i_hv) * K * V
        tl.store(p_S + off_kv, b_S, mask=m_kv)
        if p < e - 1:
            map_j = maps + ((p - i_n) * HV + i_hv) * K * (K + V)
            b_E = tl.load(map_j + off_e, mask=m_kv, other=0.0)
            if p == s:
                b_S = b_E
            else:
                b_S = _chain_step(map_j, p_S, b_E, i_v, K, V, BK, BV, BKC, V_FIRST)


@triton.jit
def _kda_state_cp_bwd_chain_kernel(
    maps, dht, dend, seq_pieces,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BKC: tl.constexpr,
    HAS_DHT: tl.constexpr, V_FIRST: tl.constexpr,
):
    """Gradient of the end state of every piece of sequence n, in fp32, last piece first: dS = dht[n] (or 0); per
    piece p, dend[p] = dS, then dS <- M_j^T dS + F_j (dS <- F_j on the last piece, whose F already holds dht).
    maps: [NM, HV, K, K + V] fp32 from `_kda_state_cp_bwd_map_kernel`; dht: [N, HV, K, V], dend: [P, HV, K, V]
    fp32 ([.., V, K] if V_FIRST). Grid (cdiv(V, BV), N, HV)."""
    i_v, i_n, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s, e, m_kv, off_kv, off_e = _chain_coords(seq_pieces, i_n, i_v, K, V, BK, BV, V_FIRST)
    b_dS = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_DHT:
        b_dS += tl.load(dht + (i_n * HV + i_hv) * K * V + off_kv, mask=m_kv, other=0.0)
    for r in range(0, e - s):
        p = e - 1 - r
        p_dS = dend + (p * HV + i_hv) * K * V
        tl.store(p_dS + off_kv, b_dS, mask=m_kv)
        if p > s:
            map_j = maps + ((p - i_n - 1) * HV + i_hv) * K * (K + V)
            b_F = tl.load(map_j + off_e, mask=m_kv, other=0.0)
            if p == e - 1:
                b_dS = b_F
            else:
                b_dS = _chain_step(map_j, p_dS, b_F, i_v, K, V, BK, BV, BKC, V_FIRST)


@triton.jit
def _kda_state_cp_compose_kernel(
    maps, out, runs, run_m,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BKC: tl.constexpr,
    REVERSE: tl.constexpr,
):
    """One map of each run of piece maps (the pieces of one sequence, in order), in fp32 with IEEE products: from the
    run's first map on, X <- M_j X + [0 | E_j] (the forward's [M | E]); REVERSE, from its last map back (the
    backward's [M^T | F]). maps: [NM, HV, K, K + V] fp32; out: [R, HV, K, K + V] fp32; runs: [R + 1] int64, the
    runs' map ranges; run_m: [R] int32, 0 where the M part is not needed (its first / last map holds none: those
    columns of out are left unwritten). Grid (cdiv(K + V, BV), R, HV)."""
    i_c, i_r, i_hv = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if (tl.load(run_m + i_r) == 0) & ((i_c + 1) * BV <= K):
        return
    s = tl.load(runs + i_r).to(tl.int64)
    e = tl.load(runs + i_r + 1).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_c = i_c * BV + tl.arange(0, BV)
    m_kc = (o_k < K)[:, None] & (o_c < K + V)[None, :]
    off = o_k[:, None] * (K + V) + o_c[None, :]
    dst = out + (i_r.to(tl.int64) * HV + i_hv) * K * (K + V)
    j0 = e - 1 if REVERSE else s
    b_X = tl.load(maps + (j0 * HV + i_hv) * K * (K + V) + off, mask=m_kc, other=0.0)
    for r in range(1, e - s):
        j = e - 1 - r if REVERSE else s + r
        tl.debug_barrier()  # every thread has read the previous X
        tl.store(dst + off, b_X, mask=m_kc)
        tl.debug_barrier()  # X is whole in `dst` before its rows are read back in slices
        map_j = maps + (j * HV + i_hv) * K * (K + V)
        b_X = tl.load(map_j + off, mask=m_kc & (o_c >= K)[None, :], other=0.0)
        for kc in tl.static_range(0, BK, BKC):
            o_kc = kc + tl.arange(0, BKC)
            b_M = tl.load(map_j + o_k[:, None] * (K + V) + o_kc[None, :],
                          mask=(o_k < K)[:, None] & (o_kc < K)[None, :], other=0.0)
            b_Xk = tl.load(dst + o_kc[:, None] * (K + V) + o_c[None, :],
                           mask=(o_kc < K)[:, None] & (o_c < K + V)[None, :], other=0.0)
            b_X += tl.dot(b_M, b_Xk, input_precision="ieee")
    tl.debug_barrier()
    tl.store(dst + off, b_X, mask=m_kc)


def state_shape(n: int, HV: int, K: int, V: int, state_v_first: bool) -> tuple:
    """Shape of n fp32 states: [n, HV, K, V], or [n, HV, V, K] with V-first states."""
    return (n, HV, V, K) if state_v_first else (n, HV, K, V)


def cp_initial_states(kg, w, u, gl, rs, h0, seqs, pieces: PiecePlan, BT: int, *, state_v_first: bool,
                      prec: str) -> torch.Tensor:
    """Start state of every piece: [P, HV, K, V] fp32 ([P, HV, V, K] with state_v_first).
    kg, w: [TT, HV, K] (fp16 pairs where rs [TT, HV] is not empty: `wy.IntraOut`); u: [TT, HV, V]; gl: [NT, HV, K]
    fp32; h0: None or [N, HV, K, V] fp32 (V-first likewise);
    seqs: the ChunkPlan of the sequences."""
    TT, HV, K = w.shape
    V = u.shape[-1]
    dev = w.device
    arch = arch_of(dev)
    cfg = cp_config(arch, K, V, w.element_size(), w.dtype == torch.bfloat16, BT)
    nkb = cdiv(K, cfg.BC)
    maps = torch.empty(pieces.NM, HV, K, K + V, device=dev, dtype=torch.float32)
    init = torch.empty(state_shape(pieces.N, HV, K, V, state_v_first), device=dev, dtype=torch.float32)
    common = dict(HV=HV, K=K, V=V, BK=_kpad(K, arch), V_FIRST=state_v_first)
    if pieces.NM:
        launch_kernel(_kda_state_cp_fwd_map_kernel, (nkb + cdiv(V, cfg.BC), pieces.NM, HV),
            kg, w, u, gl, rs if rs.numel() else gl, h0 if h0 is not None else init, maps,
            pieces.cu_seqlens, pieces.chunk_offsets, pieces.piece_seq, pieces.seq_pieces, pieces.fwd_maps,
            BT=BT, BC=cfg.BC, NKB=nkb, HAS_H0=h0 is not None, IS_BF16=w.dtype == torch.bfloat16, PREC=prec,
            PAIRS=rs.numel() > 0, PREFETCH=cfg.fwd_stages > 1,
            num_warps=cfg.fwd_warps, num_stages=cfg.fwd_stages, **common,
        )
    launch_kernel(_kda_state_cp_fwd_chain_kernel, (cdiv(V, cfg.chain_BV), seqs.N, HV),
        maps, h0 if h0 is not None else init, init, pieces.seq_pieces, BV=cfg.chain_BV, BKC=cfg.chain_BKC,
        HAS_H0=h0 is not None,
        num_warps=cfg.chain_warps, num_stages=1, **common,
    )
    return init


def cp_end_gradients(qg, kg, w, Aqk, gl, rs, do, dht, seqs, pieces: PiecePlan, BT: int, *, state_v_first: bool,
                     prec: str) -> torch.Tensor:
    """Gradient of the end state of every piece: [P, HV, K, V] fp32 ([P, HV, V, K] with state_v_first).
    qg, kg, w: [TT, HV, K] (fp16 pairs where rs [TT, HV] is not empty: `wy.IntraOut`); Aqk: [TT, HV, BT]; gl:
    [NT, HV, K] fp32; do: [TT, HV, V]; dht: None or [N, HV, K, V] fp32 (V-first likewise); seqs: the ChunkPlan of
    the sequences."""
    TT, HV, K = w.shape
    V = do.shape[-1]
    dev = w.device
    arch = arch_of(dev)
    cfg = cp_config(arch, K, V, w.element_size(), w.dtype == torch.bfloat16, BT)
    nkb = cdiv(K, cfg.BC)
    maps = torch.empty(pieces.NM, HV, K, K + V, device=dev, dtype=torch.float32)
    dend = torch.empty(state_shape(pieces.N, HV, K, V, state_v_first), device=dev, dtype=torch.float32)
    common = dict(HV=HV, K=K, V=V, BK=_kpad(K, arch), V_FIRST=state_v_first)
    if pieces.NM:
        launch_kernel(_kda_state_cp_bwd_map_kernel, (nkb + cdiv(V, cfg.BC), pieces.NM, HV),
            qg, kg, w, Aqk, gl, rs if rs.numel() else gl, do, dht if dht is not None else dend, maps,
            pieces.cu_seqlens, pieces.chunk_offsets, pieces.piece_seq, pieces.seq_pieces, pieces.bwd_maps,
            BT=BT, BC=cfg.BC, NKB=nkb, HAS_DHT=dht is not None, IS_BF16=w.dtype == torch.bfloat16, PREC=prec,
            PAIRS=rs.numel() > 0, PREFETCH=cfg.bwd_stages > 1,
            num_warps=cfg.bwd_warps, num_stages=cfg.bwd_stages, **common,
        )
    launch_kernel(_kda_state_cp_bwd_chain_kernel, (cdiv(V, cfg.chain_BV), seqs.N, HV),
        maps, dht if dht is not None else dend, dend, pieces.seq_pieces, BV=cfg.chain_BV, BKC=cfg.chain_BKC,
        HAS_DHT=dht is not None,
        num_warps=cfg.chain_warps, num_stages=1, **common,
    )
    return dend

