"""Few heads over long sequences on Hopper: backend ``sm90_split``. The compiled 64-token intra stage
(``sm90_v2.intra64_fwd``), then Triton's intra-card chunk-parallel state passing (state_cp.py: the long sequences cut
into pieces, each piece's map [M | E] in parallel, the maps chained into every piece's start state), then the compiled
64-token recurrence on wgmma (``sm90_v2.state64_fwd``) over the pieces as if they were sequences, each from its start
state.

It takes exactly the calls ``sm90`` leaves to Triton because Triton's state passing beats its 16-token recurrence
there (``sm90.triton_state_faster``: few heads, sequences past 8192 tokens), on compute capability 9.0 (where both were
measured). Pieces of at least MIN_PIECE_CHUNKS chunks (Triton's planner, pricing its own serial pass, picks shorter
ones). o within bf16 rounding of Triton's forward. ``TRITON_KDA_SM90_SPLIT=0`` leaves these calls to Triton.
"""
from __future__ import annotations

import torch

from cuda_fast import sm90, sm90_v2
from cuda_fast.library import compiled_backend
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.configs import precision_of
from triton_kda.state_cp import cp_initial_states, plan_pieces

NAME = "sm90_split"
ENV_SWITCH = "TRITON_KDA_SM90_SPLIT"  # "0": these calls go to Triton
BT = sm90_v2.BT
# H200, bf16 Kimi flags, h0 / ht, B1 H8 (docs/benchmarks/runs/2026-11-29_order, call 9): T32768 780 / 716 / 869 us in
# pieces of 32 (the planner's) / 64 / 128 chunks, 925 at 16; T131072 3553 / 2986 / 2700 / 2554 at 16 / 32 / 64 / 128
# (the planner's); T65536: the planner's 64
MIN_PIECE_CHUNKS = 64


def verify(args: dict) -> tuple[bool, str]:
    """Whether this backend takes a ``chunk_kda`` call: in ``sm90``'s scope, on compute capability 9.0, where Triton's
    state pass is the faster one."""
    ok, why = sm90.scope(args)
    if not ok:
        return ok, why
    if not args["q"].is_cuda or torch.cuda.get_device_capability(args["q"].device) != (9, 0):
        return False, "measured on compute capability 9.0 only"
    why = sm90.triton_state_faster(args)
    if not why:
        return False, "sm90's recurrence is the faster here"
    return True, f"compiled 64-token intra stage and recurrence over Triton's chunk-parallel state passing ({why})"


def chunk_kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
    """The registry's entry point (``triton_kda.ops`` documents the call)."""
    B, T, HV, V = v.shape
    plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu, cu_seqlens)
    intra = sm90_v2.intra64_fwd(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, flags)
    h0 = initial_state.contiguous() if initial_state is not None else None
    pieces = plan_pieces(plan.lens, BT, HV, p.K, V, 2, q.device, seqs=plan, min_chunks=MIN_PIECE_CHUNKS)
    runs, start = plan, h0  # no pieces where the planner's environment changed since `verify`: the sequences whole
    if pieces is not None:
        runs = pieces
        start = cp_initial_states(intra.kg, intra.w, intra.u, intra.gl, intra.rs, h0, plan, pieces, BT,
                                  state_v_first=p.state_v_first, prec=precision_of(q.dtype))
    o, ht = sm90_v2.state64_fwd(intra, start, runs, output_final_state=flags["output_final_state"],
                                state_v_first=p.state_v_first)
    if pieces is not None and ht is not None:
        ht = ht[pieces.last]
    return o.view(B, T, HV, V), ht

BACKEND = compiled_backend(NAME, sm90.OP, ENV_SWITCH, verify, chunk_kda_fwd, "kda_intra64_fwd",
                           sm90_v2.Intra64Args)
