"""Context parallel across ranks, the context and its plan (cp.py runs the calls): `build_cp_context` cuts the
global varlen batch (`cu_seqlens` with T tokens) into S equal parts of T / S tokens under a layout (`contiguous`:
S = W, rank r holds part r; `zigzag`: S = 2W, rank r holds parts r and 2W - 1 - r, front then back), checks that
every rank of the group passed the same batch (one small all-gather of a fingerprint) and returns this rank's
`CPContext`: fla's `FLACPContext` fields, plus the global sequence of every local one; `partition` computes its
fields on the host alone. Per call, `cp_plan` turns a validated context (ours or fla's) into a `CPPlan`: the parts
this rank holds with their chain slots and how many earlier / later parts their end sequences span, whether the
state maps must be exchanged at all, and the device index tables that place the global initial / final states on
the local sequences (cached per batch layout). `_all_gather` is the one collective both modules call.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from triton_kda._checks import seqlens_on_cpu
from triton_kda._validate_cp import check_group

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
