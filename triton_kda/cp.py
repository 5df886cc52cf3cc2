"""Context parallel across ranks (torch.distributed), the calls: `chunk_kda` on one varlen batch split over the
ranks of a process group, its autograd Function and the state exchange between the stages; the context
(`build_cp_context`) and its per-call plan (`cp_plan`) are cp_plan.py's.

The global batch (`cu_seqlens` with T tokens, B = 1) is cut into S equal parts of T / S tokens: S = W parts with the
`contiguous` layout (rank r holds part r), S = 2W with `zigzag` (rank r holds parts r and 2W - 1 - r, laid out
[front; back] in its local tensors, which balances causal attention layers). A part's local sequences are the
pieces of the global sequences that overlap it; only the first can continue a sequence from earlier parts and only
the last can continue into later ones. Each piece's state update is affine (KDA_SPEC.md): S_out = M S_in + E, and
the state kernels of `state_cp.py` compute such maps for a run of chunks. Per `chunk_kda` call:

forward  1. the intra stage on the local tokens;
         2. for each local part whose last sequence continues, its map [M | E] (`_kda_state_cp_fwd_map_kernel` over
            that sequence: M only if the sequence also started before this part, E from the initial state if it
            starts here; a long one in pieces, composed by `_kda_state_cp_compose_kernel`), in a fixed-size fp32
            buffer [parts per rank, HV, K, K + V];
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

import functools
from typing import NamedTuple

import torch

from triton_kda._checks import seqlens_on_cpu
from triton_kda._validate import KDAProblem
from triton_kda.chunk_bwd import chunk_bwd
from triton_kda.chunk_fwd import intra_stage, plan_chunks, saved_intermediates
from triton_kda.configs import _kpad, arch_of, cdiv, cp_config, precision_of
from triton_kda.cp_plan import CPPlan, _all_gather, cp_plan
from triton_kda.launch import launch_kernel
from triton_kda.state import grad_state_dtype, state_fwd
from triton_kda.state_cp import (
    _kda_state_cp_bwd_chain_kernel,
    _kda_state_cp_bwd_map_kernel,
    _kda_state_cp_compose_kernel,
    _kda_state_cp_fwd_chain_kernel,
    _kda_state_cp_fwd_map_kernel,
    map_piece_chunks,
    state_shape,
)
from triton_kda.wy import IntraOut, pairs, wy_recompute


class _Chains(NamedTuple):
    """Per part, the slot range of its chain over the gathered maps (device int64) or None."""
    fwd: tuple  # [first slot, own slot + 1]: the chain to the part's start state
    bwd: tuple  # [own slot, last slot + 1]: the chain to the gradient of its end state


@functools.lru_cache(maxsize=64)
def _chains(parts: tuple, device: torch.device) -> _Chains:
    def dev(x: list) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.int64).to(device, non_blocking=True)

    return _Chains(tuple(dev([p.slot - p.pre, p.slot + 1]) if p.pre > 0 else None for p in parts),
                   tuple(dev([p.slot, p.slot + p.post + 1]) if p.post > 0 else None for p in parts))


class _Export(NamedTuple):
    """The exported maps of one direction: the local sequences they cover, cut into pieces of L chunks (the map
    kernel runs the pieces as its sequences), and how the piece maps compose into one map per sequence."""
    cu_seqlens: torch.Tensor     # [P + 1] int64: token boundaries of the pieces
    chunk_offsets: torch.Tensor  # [P + 1] int64: first global chunk of each piece
    piece_seq: torch.Tensor      # [P] int32: local sequence of each piece
    ends: torch.Tensor           # [N_local + 1] int64, the map kernel's `seq_pieces`: forward, [n] = first piece of n
                                 # where n starts on this rank; backward, [n + 1] = last piece of n + 1 where n ends
                                 # here; else -1 (those pieces start from h0 / dht and need no M)
    map_pieces: torch.Tensor     # [NM] int32: the pieces of the exported sequences, sequence by sequence
    runs: torch.Tensor           # [R + 1] int64: map range of each exported sequence
    run_m: torch.Tensor          # [R] int32: whether its composed map needs M (it neither starts nor ends here)
    NM: int
    R: int
    split: bool                  # some sequence has more than one piece (else the maps are the exported ones)


def _exported_seqs(parts: tuple, which: str) -> list:
    """The local sequences this rank's parts export: the last of each part with post > 0 (which = 'post', forward)
    or the first of each with pre > 0 ('pre', backward)."""
    return [getattr(p, "last" if which == "post" else "first") for p in parts if getattr(p, which) > 0]


@functools.lru_cache(maxsize=64)
def _export_tables(parts: tuple, lens: tuple, BT: int, L: int, which: str, device: torch.device) -> _Export:
    """`_Export` of the sequences that this rank's parts export (`_exported_seqs`), each cut into pieces of L
    chunks."""
    exported = _exported_seqs(parts, which)
    continued = {p.first for p in parts if p.pre > 0}
    continuing = {p.last for p in parts if p.post > 0}
    cu, offs, piece_seq, first_piece, last_piece = [], [], [], [], []
    bos = chunk = 0
    for n, T in enumerate(lens):
        nc = (T + BT - 1) // BT
        first_piece.append(len(piece_seq))
        for i in range(max(1, (nc + L - 1) // L) if n in exported else 1):
            cu.append(bos + min(i * L * BT, T))
            offs.append(chunk + min(i * L, nc))
            piece_seq.append(n)
        last_piece.append(len(piece_seq) - 1)
        bos, chunk = bos + T, chunk + nc
    cu.append(bos)
    offs.append(chunk)
    if which == "post":
        ends = [first_piece[n] if n not in continued else -1 for n in range(len(lens))] + [-1]
    else:
        ends = [-1] + [last_piece[n] + 1 if n not in continuing else -1 for n in range(len(lens))]
    map_pieces, runs, run_m = [], [0], []
    for n in exported:
        map_pieces += range(first_piece[n], last_piece[n] + 1)
        runs.append(len(map_pieces))
        run_m.append(int(n in (continued if which == "post" else continuing)))

    def dev(x: list, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(x, dtype=dtype).to(device, non_blocking=True)

    return _Export(dev(cu), dev(offs), dev(piece_seq, torch.int32), dev(ends), dev(map_pieces, torch.int32),
                   dev(runs), dev(run_m, torch.int32), len(map_pieces), len(exported),
                   len(map_pieces) > len(exported))


def _chain_order(gathered: torch.Tensor, world_size: int, per_rank: int) -> torch.Tensor:
    """[W * per_rank, ...] in rank order -> [slots, ...] in stream order (zigzag: fronts ascending, backs
    descending)."""
    if per_rank == 1:
        return gathered
    g = gathered.view(world_size, per_rank, *gathered.shape[1:])
    return torch.cat([g[:, 0], g[:, 1].flip(0)])


def _exported(parts: tuple, which: str) -> int:
    """First buffer slot of the parts that export a forward ('post') or reverse ('pre') map: the exporting parts are
    always a contiguous run of this rank's (at most two) parts."""
    return next((i for i, p in enumerate(parts) if getattr(p, which) > 0), 0)


def _rows(intra: IntraOut) -> torch.Tensor:
    """The map kernels' rs argument: intra's row factors where w, qg, kg are fp16 pairs, else a placeholder."""
    return intra.rs if pairs(intra) else intra.gl


def _export(kernel, inputs: tuple, state, which: str, V: int, plan, cp: CPPlan, BT: int, *, state_v_first: bool,
            prec: str, pair: bool):
    """Launch `kernel` (state_cp's forward or reverse map kernel) over the sequences this rank exports (the last
    sequence of each part with `post` > 0, or the first of each with `pre` > 0: `which`) into a fixed-size
    [parts, HV, K, K + V] fp32 buffer, and start the all-gather of every rank's buffer; returns (gathered, work).
    A long exported sequence is cut into pieces (`state_cp.map_piece_chunks`) whose maps run in parallel and are
    then composed in order by `_kda_state_cp_compose_kernel`.
    inputs: the kernel's leading tensors, the first [TT, HV, K]; pair: whether they hold fp16 pairs (`wy.IntraOut`);
    state: the local initial states / final-state gradients or None."""
    HV, K = inputs[0].shape[1:]
    dev = inputs[0].device
    arch = arch_of(dev)
    cfg = cp_config(arch, K, V, inputs[0].element_size(), inputs[0].dtype == torch.bfloat16, BT)
    warps, stages = ((cfg.fwd_warps, cfg.fwd_stages) if kernel is _kda_state_cp_fwd_map_kernel
                     else (cfg.bwd_warps, cfg.bwd_stages))
    nkb = cdiv(K, cfg.BC)
    buf = torch.empty(len(cp.parts), HV, K, K + V, device=dev, dtype=torch.float32)
    seqs = _exported_seqs(cp.parts, which)
    if seqs:
        L = map_piece_chunks(tuple((plan.lens[n] + BT - 1) // BT for n in seqs), HV, K, V, inputs[0].element_size(),
                             dev)
        ex = _export_tables(cp.parts, plan.lens, BT, L, which, dev)
        s0 = _exported(cp.parts, which)
        maps = torch.empty(ex.NM, HV, K, K + V, device=dev, dtype=torch.float32) if ex.split else buf[s0:]
        # positional constexprs, in the same order in both kernels: HV, K, V, BT, BK, BC, NKB, HAS_H0 / HAS_DHT,
        # V_FIRST, IS_BF16, PREC, PAIRS, PREFETCH
        launch_kernel(kernel, (nkb + cdiv(V, cfg.BC), ex.NM, HV),
            *inputs, state if state is not None else buf, maps, ex.cu_seqlens, ex.chunk_offsets, ex.piece_seq,
            ex.ends, ex.map_pieces, HV, K, V, BT, _kpad(K, arch), cfg.BC, nkb, state is not None, state_v_first,
            inputs[0].dtype == torch.bfloat16, prec, pair, stages > 1, num_warps=warps, num_stages=stages,
        )
        if ex.split:
            launch_kernel(_kda_state_cp_compose_kernel, (cdiv(K + V, cfg.chain_BV), ex.R, HV),
                maps, buf[s0:], ex.runs, ex.run_m, HV, K, V, _kpad(K, arch), cfg.chain_BV, cfg.chain_BKC,
                which == "pre", num_warps=cfg.chain_warps, num_stages=1,
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
        launch_kernel(kernel, (cdiv(V, cfg.chain_BV), 1, HV),
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
        chains = _chains(cp.parts, q.device)
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
                                     h0 if initial_state is not None else None, "post", V, plan, cp, BT,
                                     state_v_first=p.state_v_first, prec=prec, pair=pairs(intra))
            if not needs_chain:
                st = states()  # nothing here waits for other ranks: the state stage overlaps the all-gather
            work.wait()
            if needs_chain:
                _chain(_kda_state_cp_fwd_chain_kernel, _chain_order(gathered, cp.world_size, len(cp.parts)), h0, cp,
                       chains.fwd, [part.first for part in cp.parts], state_v_first=p.state_v_first)
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
        chains = _chains(cp.parts, q.device)
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
                                     dht_local if dht is not None else None, "pre", V, plan, cp, BT,
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
                       dht_local, cp, chains.bwd, [part.last for part in cp.parts],
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
