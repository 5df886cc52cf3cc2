"""Context parallel across ranks (torch.distributed): one varlen batch split over the ranks of a process group.

The global batch (`cu_seqlens` with T tokens, B = 1) is cut into S equal parts of T / S tokens: S = W parts with the
`contiguous` layout (rank r holds part r), S = 2W with `zigzag` (rank r holds parts r and 2W - 1 - r, laid out
[front; back] in its local tensors, which balances causal attention layers). A part's local sequences are the
pieces of the global sequences that overlap it; only the first can continue a sequence from earlier parts and only
the last can continue into later ones. Each piece's state update is affine (KDA_SPEC.md): S_out = M S_in + E, and
the state kernels of `state_cp.py` compute such maps for a run of chunks. Per `chunk_kda` call:

forward  1. the intra stage on the local tokens;
         2. for each local part whose last sequence continues, its map [M | E] (`_kda_state_cp_fwd_map_kernel` over
            that sequence: M only if the sequence also started before this part, E from the initial state if it
            starts here), in a fixed-size fp32 buffer [parts per rank, HV, K, K + V];
         3. one all-gather of those buffers (async; where no local sequence needs an incoming state, the state
            stage runs while it is in flight);
         4. for each part whose first sequence started earlier, its start state chained in fp32 from the gathered
            maps of the parts before it (`_kda_state_cp_fwd_chain_kernel`), then the state stage from those states.
backward the reverse on the gradient of the state: per part whose first sequence started earlier, the reverse map
         [M^T | F] of that sequence (`_kda_state_cp_bwd_map_kernel`; F from the final-state gradient where the
         sequence ends in this part); one all-gather (the state forward recompute runs while it is in flight); per
         part whose last sequence continues, the gradient of its end state chained from the later parts
         (`_kda_state_cp_bwd_chain_kernel`); then the usual backward from those gradients.

Beyond fla: `initial_state` and `output_final_state` work under CP with a context from `build_cp_context` (it
knows the global sequences). Every rank passes the same `initial_state` [N, HV, K, V] (N global sequences) and
reads the rows of the sequences that start on it; `final_state` is [N, HV, K, V] on every rank, holding the final
states of the sequences that end on this rank and zeros elsewhere (an all-reduce sum gives every final state).
Like the gradients of the weights, the gradients of `initial_state`, `A_log` and `dt_bias` are each rank's share:
summed over the ranks of the group they are the single-GPU gradients.

Host work only at `build_cp_context` (and the first call per batch layout, whose device tables are cached): the
calls themselves never sync with the device, launch a fixed sequence of kernels and collectives of fixed shapes,
and so can be captured in a CUDA graph. Works with NCCL (CUDA tensors) and gloo (CPU tensors, the interpreter).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from triton_kda._validate import KDAProblem, check_group, seqlens_on_cpu
from triton_kda.chunk_bwd import chunk_bwd
from triton_kda.chunk_fwd import intra_stage, plan_chunks, saved_intermediates
from triton_kda.configs import _kpad, arch_of, cdiv, cp_config, precision_of
from triton_kda.state import grad_state_dtype, state_fwd
from triton_kda.state_cp import (
    _kda_state_cp_bwd_chain_kernel,
    _kda_state_cp_bwd_map_kernel,
    _kda_state_cp_fwd_chain_kernel,
    _kda_state_cp_fwd_map_kernel,
    state_shape,
)
from triton_kda.wy import IntraOut, pairs, wy_recompute

LAYOUTS = ("contiguous", "zigzag")


@dataclasses.dataclass
class CPContext:
    """Where this rank's tokens sit in the global batch. The fields up to `pre_num_conv_tokens_by_part` are those of
    fla's `FLACPContext` (same names and meaning, so fla's CP-aware layers accept this context too); the rest are
    this project's: what the context was built for, and the global sequence of every local one (initial and final
    states under CP).

    cu_seqlens / cu_seqlens_cpu: [N_local + 1] int32, the local sequence boundaries (device / CPU; zero-length
    global sequences are left out, as fla does). pre_num_ranks / post_num_ranks: how many earlier / later parts hold
    the first / last local sequence (contiguous layout; per part, front then back, in the `_by_part` tuples of the
    zigzag layout, where part_len is the tokens per part and front_num_seqs the local sequences of the front part).
    """
    group: Any = None
    cu_seqlens: torch.Tensor | None = None
    cu_seqlens_cpu: torch.Tensor | None = None
    is_last_rank: bool | None = None
    pre_num_ranks: int | None = None
    is_first_rank: bool | None = None
    post_num_ranks: int | None = None
    conv1d_kernel_size: int | None = None
    pre_num_conv_tokens: int | None = None
    pre_num_ranks_dev: torch.Tensor | None = None
    post_num_ranks_dev: torch.Tensor | None = None
    layout: str = "contiguous"
    part_len: int | None = None
    front_num_seqs: int | None = None
    pre_num_ranks_by_part: tuple | None = None
    post_num_ranks_by_part: tuple | None = None
    is_first_by_part: tuple | None = None
    is_last_by_part: tuple | None = None
    pre_num_conv_tokens_by_part: tuple | None = None
    rank: int | None = None               # this process's rank in `group` when the context was built
    world_size: int | None = None         # the group's size then
    num_seqs_global: int | None = None    # N, sequences of the global batch (rows of initial / final states)
    seq_ids: tuple | None = None          # global sequence of each local sequence
    empty_ids: tuple | None = None        # zero-length global sequences this rank answers for (final = initial)
    crossing: bool | None = None          # whether any sequence of the global batch spans two parts

    def copy_for_backward(self) -> CPContext:
        """A copy with its own boundary tensors (fla's API, for pipeline schedules that keep contexts alive)."""
        return dataclasses.replace(
            self, cu_seqlens=self.cu_seqlens.clone() if self.cu_seqlens is not None else None,
            cu_seqlens_cpu=self.cu_seqlens_cpu.clone() if self.cu_seqlens_cpu is not None else None)

    @property
    def num_seqs(self) -> int:
        """Local sequences on this rank."""
        return 0 if self.cu_seqlens is None else len(self.cu_seqlens) - 1

    @property
    def is_cp_enabled(self) -> bool:
        return self.group is not None


class _Slice(NamedTuple):
    """One part of the global token stream: its local boundaries and where its end sequences continue."""
    bounds: list       # local boundaries, 0..part_len
    seqs: list         # global sequence of each local sequence
    pre: int           # earlier parts holding the first sequence
    post: int          # later parts holding the last sequence
    conv_tokens: int   # tokens of the first sequence before this part


def _slice(bounds: list, start: int, end: int, part_len: int) -> _Slice:
    """The non-empty global sequences overlapping tokens [start, end) (bounds: the global boundaries)."""
    lo = bisect.bisect_right(bounds, start) - 1          # the sequence holding token `start`
    hi = bisect.bisect_left(bounds, end) - 1             # the last sequence starting before `end`
    seqs = [n for n in range(lo, hi + 1) if bounds[n + 1] > bounds[n]]
    local = [max(bounds[n], start) - start for n in seqs] + [min(bounds[seqs[-1] + 1], end) - start]
    return _Slice(local, seqs, start // part_len - bounds[seqs[0]] // part_len,
                  (bounds[seqs[-1] + 1] - 1) // part_len - start // part_len, start - bounds[seqs[0]])


def partition(bounds: list, world_size: int, rank: int, layout: str) -> dict:
    """The context fields of `rank` (host ints and lists, no tensors) for global boundaries `bounds` (a list of
    ints, checked: starts at 0, non-decreasing): everything `build_cp_context` returns but the group and tensors."""
    parts = world_size * (2 if layout == "zigzag" else 1)
    total = bounds[-1]
    if total < parts or total % parts:
        what = "world_size" if layout == "contiguous" else "2 * world_size (zigzag layout)"
        raise ValueError(f"the global token count T = cu_seqlens[-1] = {total} must be a positive multiple of {what} "
                         f"= {parts} for context parallelism, got T % {parts} = {total % parts}.")
    part_len = total // parts
    slots = (rank,) if layout == "contiguous" else (rank, parts - 1 - rank)
    sl = [_slice(bounds, c * part_len, (c + 1) * part_len, part_len) for c in slots]
    empty = tuple(n for n in range(len(bounds) - 1)
                  if bounds[n] == bounds[n + 1] and min(bounds[n] // part_len, parts - 1) in slots)
    crossing = any(bounds[n] // part_len != (bounds[n + 1] - 1) // part_len
                   for n in range(len(bounds) - 1) if bounds[n + 1] > bounds[n])
    fields = dict(layout=layout, rank=rank, world_size=world_size, num_seqs_global=len(bounds) - 1,
                  seq_ids=tuple(n for s in sl for n in s.seqs), empty_ids=empty, crossing=crossing)
    if layout == "contiguous":
        s = sl[0]
        return dict(fields, cu_seqlens=s.bounds, is_first_rank=s.pre == 0, pre_num_ranks=s.pre,
                    is_last_rank=s.post == 0, post_num_ranks=s.post, pre_num_conv_tokens=s.conv_tokens)
    front, back = sl
    return dict(fields, cu_seqlens=front.bounds + [b + part_len for b in back.bounds[1:]], part_len=part_len,
                front_num_seqs=len(front.seqs), pre_num_ranks_by_part=(front.pre, back.pre),
                post_num_ranks_by_part=(front.post, back.post), is_first_by_part=(front.pre == 0, back.pre == 0),
                is_last_by_part=(front.post == 0, back.post == 0),
                pre_num_conv_tokens_by_part=(front.conv_tokens, back.conv_tokens))


def _fingerprint(bounds: list, layout: str) -> list:
    """[boundary count, T, layout, content hash]: what every rank of a group must agree on."""
    h = 0
    for b in bounds:
        h = (h * 1000003 + b) % (2 ** 61 - 1)
    return [len(bounds), bounds[-1], LAYOUTS.index(layout), h]


def _collective_device(group) -> torch.device:
    backend = str(dist.get_backend(group))
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group, async_op: bool):
    # torch >= 2.13 names it all_gather_single (all_gather_into_tensor warns there); older versions lack it
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=async_op)


def _check_same_everywhere(bounds: list, layout: str, group, world_size: int, rank: int) -> None:
    mine = _fingerprint(bounds, layout)
    dev = _collective_device(group)
    out = torch.empty(world_size * len(mine), dtype=torch.int64, device=dev)
    _all_gather(out, torch.tensor(mine, dtype=torch.int64, device=dev), group, async_op=False)
    rows = out.view(world_size, len(mine)).tolist()
    differ = [r for r in range(world_size) if rows[r] != rows[0]]
    if differ:
        desc = "; ".join(f"rank {r}: {rows[r][0]} boundaries ending at {rows[r][1]}, layout {LAYOUTS[rows[r][2]]}, "
                         f"hash {rows[r][3]:#x}" for r in sorted({0, *differ}))
        raise ValueError(f"`cu_seqlens` and `layout` must be the same on every rank of the group (the global batch), "
                         f"but rank(s) {differ} differ from rank 0 ({desc}); this is rank {rank}.")


def build_cp_context(cu_seqlens: torch.Tensor, group, cu_seqlens_cpu: torch.Tensor | None = None,
                     layout: str = "contiguous", *, conv1d_kernel_size: int | None = None,
                     verify: bool = True) -> CPContext:
    """Context for `chunk_kda(..., cp_context=ctx)` on this rank's slice of a global varlen batch.

    Args:
        cu_seqlens: ``[N + 1]`` int32/int64 global sequence boundaries (0 .. T), the same on every rank.
        group: the ``torch.distributed`` process group whose ranks share the batch (e.g. ``dist.group.WORLD``).
        cu_seqlens_cpu: its CPU copy (spares a device sync).
        layout: ``"contiguous"`` (rank r holds tokens [r T/W, (r + 1) T/W); T a multiple of W) or ``"zigzag"``
            (rank r holds the parts r and 2W - 1 - r of 2W, front then back; T a multiple of 2W).
        conv1d_kernel_size: kept in the context for fla's CP-aware convolution layers.
        verify: all-gather a fingerprint of (cu_seqlens, layout) and raise where ranks differ (one small collective;
            with NCCL it waits for the device once). All ranks of the group must call this together.

    Returns:
        a `CPContext`; each rank then calls ``chunk_kda(q_local, ..., cp_context=ctx)`` with ``q_local`` ``[1, T / W,
        H, K]`` its slice (zigzag: ``torch.cat`` of its two parts) and gets its slice of the single-GPU output.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be 'contiguous' or 'zigzag', got {layout!r}.")
    rank, world_size = check_group(group, "group")
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.ndim != 1:
        got = f"a {cu_seqlens.ndim}-D tensor" if isinstance(cu_seqlens, torch.Tensor) else type(cu_seqlens).__name__
        raise TypeError(f"`cu_seqlens` must be a 1-D integer tensor [N + 1] of global boundaries, got {got}.")
    if cu_seqlens_cpu is not None and not isinstance(cu_seqlens_cpu, torch.Tensor):
        raise TypeError(f"`cu_seqlens_cpu` must be a CPU tensor (the CPU copy of cu_seqlens) or None, got "
                        f"{type(cu_seqlens_cpu).__name__} ({cu_seqlens_cpu!r}); fla's third positional argument is "
                        f"conv1d_kernel_size, pass it by keyword here.")
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.shape[0] < 2:
        raise TypeError(f"`cu_seqlens` must be int32 or int64 with at least 2 boundaries, got {cu_seqlens.dtype} "
                        f"with {cu_seqlens.shape[0]}.")
    total = int(cu_seqlens_cpu[-1]) if cu_seqlens_cpu is not None else None
    seqlens = seqlens_on_cpu(cu_seqlens, cu_seqlens_cpu, total if total is not None else int(cu_seqlens[-1]))
    bounds = seqlens.tolist()
    if verify:
        _check_same_everywhere(bounds, layout, group, world_size, rank)
    f = partition(bounds, world_size, rank, layout)
    local_cpu = torch.tensor(f.pop("cu_seqlens"), dtype=torch.int32)
    return CPContext(group=group, cu_seqlens=local_cpu.to(cu_seqlens.device, non_blocking=True),
                     cu_seqlens_cpu=local_cpu, conv1d_kernel_size=conv1d_kernel_size, **f)


class _Part(NamedTuple):
    """One part of the global stream on this rank: its chain slot, its first and last local sequence, and how many
    earlier / later parts hold those."""
    slot: int
    first: int
    last: int
    pre: int
    post: int


class CPPlan(NamedTuple):
    """What one CP call needs from its context (host values)."""
    group: Any
    world_size: int
    slots: int          # parts of the global stream: W (contiguous) or 2W (zigzag)
    parts: tuple        # _Part per part held here, in local order
    collective: bool    # whether the state maps must be exchanged (False: no sequence crosses a part boundary)
    N: int | None       # sequences of the global batch (None for an fla context: no initial / final states)
    ids: Any            # _StateIds (None for an fla context)


class _StateIds(NamedTuple):
    """Index tensors (device, int64) mapping the global states onto the local sequences."""
    seq: torch.Tensor          # [N_local]: global sequence of each local one
    start_local: torch.Tensor  # local sequences that start on this rank ...
    start_global: torch.Tensor  # ... and their global sequence
    end_local: torch.Tensor    # local sequences that end on this rank ...
    end_global: torch.Tensor   # ... and their global sequence
    empty: torch.Tensor        # zero-length global sequences this rank answers for


def _parts(ctx, world_size: int, rank: int, n_local: int) -> tuple:
    if ctx.layout == "contiguous":
        return (_Part(rank, 0, n_local - 1, int(ctx.pre_num_ranks), int(ctx.post_num_ranks)),)
    f = int(ctx.front_num_seqs)
    (pre0, pre1), (post0, post1) = ctx.pre_num_ranks_by_part, ctx.post_num_ranks_by_part
    return (_Part(rank, 0, f - 1, int(pre0), int(post0)),
            _Part(2 * world_size - 1 - rank, f, n_local - 1, int(pre1), int(post1)))


@functools.lru_cache(maxsize=64)
def _state_ids(seq_ids: tuple, empty_ids: tuple, parts: tuple, device: torch.device) -> _StateIds:
    continued = {p.first for p in parts if p.pre > 0}
    continuing = {p.last for p in parts if p.post > 0}
    starts = [i for i in range(len(seq_ids)) if i not in continued]
    ends = [i for i in range(len(seq_ids)) if i not in continuing]

    def dev(x: list) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.int64).to(device, non_blocking=True)

    return _StateIds(dev(list(seq_ids)), dev(starts), dev([seq_ids[i] for i in starts]), dev(ends),
                     dev([seq_ids[i] for i in ends]), dev(list(empty_ids)))


def cp_plan(ctx, n_local: int, device: torch.device) -> CPPlan:
    """The plan of a context validated by `validate_chunk_kda` (ours or fla's)."""
    group = ctx.group
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = _parts(ctx, world_size, rank, n_local)
    slots = world_size * len(parts)
    ids = None
    if getattr(ctx, "seq_ids", None) is not None:
        ids = _state_ids(tuple(ctx.seq_ids), tuple(ctx.empty_ids), parts, device)
    crossing = getattr(ctx, "crossing", None)
    return CPPlan(group, world_size, slots, parts, crossing is not False and slots > 1,
                  getattr(ctx, "num_seqs_global", None), ids)


class _Tables(NamedTuple):
    """Device tables that point the state_cp map and chain kernels at this rank's end sequences."""
    piece_seq: torch.Tensor    # [N_local] int32: arange (a local sequence is its own piece and state row)
    fwd_first: torch.Tensor    # [N_local + 1] int64: [n] = n where local sequence n starts on this rank, else -1
    bwd_last: torch.Tensor     # [N_local + 1] int64: [n + 1] = n + 1 where n ends on this rank, else -1
    fwd_maps: torch.Tensor     # [<= 2] int32: the sequences whose forward map this rank exports
    bwd_maps: torch.Tensor     # [<= 2] int32: the sequences whose reverse map this rank exports
    fwd_chains: tuple          # per part: [first slot, own slot + 1] int64 (the chain to its start state) or None
    bwd_chains: tuple          # per part: [own slot, last slot + 1] int64 (the chain to its end gradient) or None


@functools.lru_cache(maxsize=64)
def _tables(parts: tuple, n_local: int, device: torch.device) -> _Tables:
    continued = {p.first for p in parts if p.pre > 0}
    continuing = {p.last for p in parts if p.post > 0}
    fwd_first = [n if n not in continued else -1 for n in range(n_local)] + [-1]
    bwd_last = [-1] + [n + 1 if n not in continuing else -1 for n in range(n_local)]

    def dev(x: list, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(x, dtype=dtype).to(device, non_blocking=True)

    return _Tables(
        dev(list(range(n_local)), torch.int32), dev(fwd_first), dev(bwd_last),
        dev([p.last for p in parts if p.post > 0], torch.int32),
        dev([p.first for p in parts if p.pre > 0], torch.int32),
        tuple(dev([p.slot - p.pre, p.slot + 1]) if p.pre > 0 else None for p in parts),
        tuple(dev([p.slot, p.slot + p.post + 1]) if p.post > 0 else None for p in parts),
    )


def _chain_order(gathered: torch.Tensor, world_size: int, per_rank: int) -> torch.Tensor:
    """[W * per_rank, ...] in rank order -> [slots, ...] in stream order (zigzag: fronts ascending, backs
    descending)."""
    if per_rank == 1:
        return gathered
    g = gathered.view(world_size, per_rank, *gathered.shape[1:])
    return torch.cat([g[:, 0], g[:, 1].flip(0)])


def _exported(parts: tuple, which: str) -> tuple[int, int]:
    """(first buffer slot, count) of the parts that export a forward ('post') or reverse ('pre') map: the exporting
    parts are always a contiguous run of this rank's (at most two) parts."""
    idx = [i for i, p in enumerate(parts) if getattr(p, which) > 0]
    return (idx[0] if idx else 0), len(idx)


def _rows(intra: IntraOut) -> torch.Tensor:
    """The map kernels' rs argument: intra's row factors where w, qg, kg are fp16 pairs, else a placeholder."""
    return intra.rs if pairs(intra) else intra.gl


def _export(kernel, inputs: tuple, state, which: str, V: int, plan, cp: CPPlan, tables: tuple, BT: int, *,
            state_v_first: bool, prec: str, pair: bool):
    """Launch `kernel` (state_cp's forward or reverse map kernel) over the sequences this rank exports (the last
    sequence of each part with `post` > 0, or the first of each with `pre` > 0: `which`) into a fixed-size
    [parts, HV, K, K + V] fp32 buffer, and start the all-gather of every rank's buffer; returns (gathered, work).
    inputs: the kernel's leading tensors, the first [TT, HV, K]; pair: whether they hold fp16 pairs (`wy.IntraOut`);
    state: the local initial states / final-state gradients or None; tables: the kernel's (piece_seq, seq_pieces,
    map_pieces)."""
    HV, K = inputs[0].shape[1:]
    dev = inputs[0].device
    arch = arch_of(dev)
    cfg = cp_config(arch, K, V, inputs[0].element_size())
    nkb = cdiv(K, cfg.BC)
    buf = torch.empty(len(cp.parts), HV, K, K + V, device=dev, dtype=torch.float32)
    s0, nm = _exported(cp.parts, which)
    if nm:
        # positional constexprs, in the same order in both kernels: HV, K, V, BT, BK, BC, NKB, HAS_H0 / HAS_DHT,
        # V_FIRST, IS_BF16, PREC, PAIRS
        kernel[(nkb + cdiv(V, cfg.BC), nm, HV)](
            *inputs, state if state is not None else buf, buf[s0:], plan.cu_seqlens, plan.chunk_offsets, *tables,
            HV, K, V, BT, _kpad(K, arch), cfg.BC, nkb, state is not None, state_v_first,
            inputs[0].dtype == torch.bfloat16, prec, pair, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
    gathered = torch.empty(cp.world_size * buf.shape[0], *buf.shape[1:], device=dev, dtype=buf.dtype)
    return gathered, _all_gather(gathered, buf, cp.group, async_op=True)


def _chain(kernel, maps: torch.Tensor, states: torch.Tensor, cp: CPPlan, chains: tuple, rows: list, *,
           state_v_first: bool) -> None:
    """For each part with a chain, run `kernel` (the state_cp forward or reverse chain kernel, one sequence whose
    pieces are the parts of the stream) over the gathered maps in stream order, and copy the state it leaves at the
    part's own slot into row rows[i] of `states` (the local start states / end-state gradients)."""
    HV, K, V = maps.shape[1], maps.shape[2], maps.shape[3] - maps.shape[2]
    arch = arch_of(maps.device)
    cfg = cp_config(arch, K, V, 4)  # the chain blocks do not depend on the input dtype
    out = torch.empty(state_shape(cp.slots, HV, K, V, state_v_first), device=maps.device, dtype=torch.float32)
    for part, chain, row in zip(cp.parts, chains, rows, strict=True):
        if chain is None:
            continue
        # arguments: maps, start state (unused: the first map already holds it), per-slot states, slot range
        kernel[(cdiv(V, cfg.chain_BV), 1, HV)](
            maps, out, out, chain, HV, K, V, _kpad(K, arch), cfg.chain_BV, cfg.chain_BKC, False, state_v_first,
            num_warps=cfg.chain_warps, num_stages=1,
        )
        states[row].copy_(out[part.slot])


def _local_initial_states(initial_state, cp: CPPlan, n_local: int, HV: int, K: int, V: int, state_v_first: bool,
                          device: torch.device):
    """[N_local, ...] fp32 start states: the rows of `initial_state` (global) of the local sequences (the rows of
    continued sequences are overwritten by the chain), zeros without it; None where nothing needs one."""
    if initial_state is not None:
        return initial_state.index_select(0, cp.ids.seq)
    if any(p.pre > 0 for p in cp.parts):
        return torch.zeros(state_shape(n_local, HV, K, V, state_v_first), device=device, dtype=torch.float32)
    return None


def _global_final_states(ht, initial_state, cp: CPPlan):
    """[N, ...] fp32: the final states of the sequences ending on this rank (from the local ones, `ht`), the initial
    state (or 0) of the empty sequences this rank answers for, zeros elsewhere."""
    final = torch.zeros(cp.N, *ht.shape[1:], device=ht.device, dtype=torch.float32)
    final.index_copy_(0, cp.ids.end_global, ht.index_select(0, cp.ids.end_local))
    if initial_state is not None:
        final.index_copy_(0, cp.ids.empty, initial_state.index_select(0, cp.ids.empty))
    return final


class ChunkKDACPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, A_log, dt_bias, initial_state, p: KDAProblem, flags, cp: CPPlan, grad):
        B, T, HV, V = v.shape
        K, BT = p.K, p.chunk_size
        plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu)
        tabs = _tables(cp.parts, plan.N, q.device)
        prec = precision_of(q.dtype)
        keep = flags["disable_recompute"] and grad
        return_h = flags["return_intermediate_states"]
        intra = intra_stage(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, BT, flags, store_aux=grad)
        h0 = _local_initial_states(initial_state, cp, plan.N, HV, K, V, p.state_v_first, q.device)
        needs_chain = any(part.pre > 0 for part in cp.parts)

        def states():
            return state_fwd(intra, h0, plan, BT, V, output_final_state=flags["output_final_state"],
                             state_v_first=p.state_v_first, store_h=return_h or keep, store_v_new=keep,
                             h_dtype=grad_state_dtype(q.dtype) if keep else q.dtype)

        if cp.collective:
            gathered, work = _export(_kda_state_cp_fwd_map_kernel, (intra.kg, intra.w, intra.u, intra.gl, _rows(intra)),
                                     h0 if initial_state is not None else None, "post", V, plan, cp,
                                     (tabs.piece_seq, tabs.fwd_first, tabs.fwd_maps), BT,
                                     state_v_first=p.state_v_first, prec=prec, pair=pairs(intra))
            if not needs_chain:
                st = states()  # nothing here waits for other ranks: the state stage overlaps the all-gather
            work.wait()
            if needs_chain:
                _chain(_kda_state_cp_fwd_chain_kernel, _chain_order(gathered, cp.world_size, len(cp.parts)), h0, cp,
                       tabs.fwd_chains, [part.first for part in cp.parts], state_v_first=p.state_v_first)
                st = states()
        else:
            st = states()
        final = None
        if flags["output_final_state"]:
            final = _global_final_states(st.final_state, initial_state, cp)
        saved = saved_intermediates(intra, st, keep=keep, grad=grad)
        ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, initial_state, h0, *saved)
        ctx.p, ctx.flags, ctx.cp, ctx.keep = p, flags, cp, keep
        o = st.o.view(B, T, HV, V)
        if return_h:
            h = st.h.to(q.dtype).view(1, -1, *st.h.shape[1:])
            ctx.mark_non_differentiable(h)
            return o, final, h
        return o, final

    @staticmethod
    def backward(ctx, do, dht, *unused):
        q, k, v, g, beta, A_log, dt_bias, initial_state, h0, *kept = ctx.saved_tensors
        p, flags, cp = ctx.p, ctx.flags, ctx.cp
        B, T, HV, V = v.shape
        K, BT = p.K, p.chunk_size
        plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu)
        tabs = _tables(cp.parts, plan.N, q.device)
        prec = precision_of(q.dtype)
        a_log = A_log.reshape(-1) if A_log is not None else None
        dt = dt_bias.reshape(-1) if dt_bias is not None else None
        qf, kf, vf, gf = (x.flatten(0, 1).contiguous() for x in (q, k, v, g))
        do_f = do.flatten(0, 1).contiguous()
        if ctx.keep:
            intra, h, v_new = IntraOut(*kept[:-2]), kept[-2], kept[-1]
        else:
            intra = wy_recompute(qf, kf, vf, gf, a_log, dt, *kept, p.scale, plan, BT,
                                 use_gate_in_kernel=flags["use_gate_in_kernel"], lower_bound=flags["lower_bound"],
                                 use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"])
        # the local final-state gradient: the caller's rows of the local sequences (those of sequences continuing
        # on later ranks are replaced by the chain)
        needs_chain = any(part.post > 0 for part in cp.parts)
        dht_local = None
        if dht is not None:
            dht_local = dht.index_select(0, cp.ids.seq)
        elif needs_chain:
            dht_local = torch.zeros(state_shape(plan.N, HV, K, V, p.state_v_first), device=q.device,
                                    dtype=torch.float32)
        if cp.collective:
            gathered, work = _export(_kda_state_cp_bwd_map_kernel,
                                     (intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, _rows(intra), do_f),
                                     dht_local if dht is not None else None, "pre", V, plan, cp,
                                     (tabs.piece_seq, tabs.bwd_last, tabs.bwd_maps), BT,
                                     state_v_first=p.state_v_first, prec=prec, pair=pairs(intra))
        if not ctx.keep:
            # overlaps the all-gather
            st = state_fwd(intra, h0, plan, BT, V, output_final_state=False, state_v_first=p.state_v_first,
                           store_h=True, store_v_new=True, h_dtype=grad_state_dtype(q.dtype), store_o=False)
            h, v_new = st.h, st.v_new
        if cp.collective:
            work.wait()
            if needs_chain:
                _chain(_kda_state_cp_bwd_chain_kernel, _chain_order(gathered, cp.world_size, len(cp.parts))[1:],
                       dht_local, cp, tabs.bwd_chains, [part.last for part in cp.parts],
                       state_v_first=p.state_v_first)
        gr = chunk_bwd(
            do_f, dht_local, qf, kf, vf, gf, beta.flatten(0, 1).contiguous(), a_log, dt, intra, h, v_new, plan, BT,
            p.scale, use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"],
            use_gate_in_kernel=flags["use_gate_in_kernel"], lower_bound=flags["lower_bound"],
            use_beta_sigmoid_in_kernel=flags["use_beta_sigmoid_in_kernel"],
            allow_neg_eigval=flags["allow_neg_eigval"], state_v_first=p.state_v_first,
            want_dh0=initial_state is not None,
        )
        dh0 = None
        if initial_state is not None:
            dh0 = torch.zeros_like(initial_state)
            dh0.index_copy_(0, cp.ids.start_global, gr.dh0.index_select(0, cp.ids.start_local))
            if dht is not None:
                dh0.index_copy_(0, cp.ids.empty, dht.index_select(0, cp.ids.empty))
        return (gr.dq.view_as(q), gr.dk.view_as(k), gr.dv.view_as(v), gr.dg.view_as(g), gr.dbeta.view_as(beta),
                gr.dA_log.view_as(A_log) if gr.dA_log is not None else None,
                gr.ddt_bias.view_as(dt_bias) if gr.ddt_bias is not None else None, dh0, None, None, None, None)


@torch.compiler.disable
def chunk_kda_cp(q, k, v, g, beta, initial_state, p: KDAProblem, flags: dict, cp_context, requires_grad: bool):
    """`chunk_kda` on this rank's slice under a validated `cp_context` (ours or fla's); returns what `chunk_kda`
    returns, with the final state as the module docstring says. Not the custom op of ops.py (a context is no tensor
    an op schema could carry, and the collectives run between the stages): eager under torch.compile."""
    if p.seqlens_cpu is None:  # validation was traced (torch.compile) and could not read the boundaries
        p = p._replace(seqlens_cpu=seqlens_on_cpu(cp_context.cu_seqlens, cp_context.cu_seqlens_cpu, q.shape[1]))
    cp = cp_plan(cp_context, p.N, q.device)
    return ChunkKDACPFunction.apply(q, k, v, g, beta, p.A_log, p.dt_bias, initial_state, p, flags, cp,
                                    requires_grad)
