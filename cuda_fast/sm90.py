"""The compiled CUDA forward of ``chunk_kda`` for Hopper (sm_90a) and Blackwell (sm_100a): backend ``sm90``.

Scope (the verifier declines everything else, with the reason): inference (no autograd graph), bf16 q/k/v,
K = V = 128, g bf16 or fp32, beta bf16 or fp32; every gate form (pre-gated, softplus, lower bound), l2norm and beta
sigmoid in kernel, allow_neg_eigval, GVA, varlen, fp32 initial/final state in both layouts. ``chunk_size`` only
steers Triton's numerics: this backend always works on 16-token chunks (cuda_fast/csrc/kda_fwd.cu).

The library is built by nvcc on first use (``cuda_fast.build``: cached, plain C ABI, loaded through ctypes), never
at import. ``kda_fwd`` validates sizes, alignment and that every pointer is memory of the current device before it
launches anything; no device-to-host synchronisation happens on the call (varlen plans come from the CPU copy of
cu_seqlens).
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
from typing import NamedTuple

import torch

from cuda_fast.library import compiled_backend, entry_for
from cuda_fast.library import data_ptr as _ptr
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.configs import capturing, sm_count
from triton_kda.gate import gate_mode
from triton_kda.state_cp import piece_chunks

NAME = "sm90"
OP = "chunk_kda_fwd"
ENV_SWITCH = "TRITON_KDA_SM90"
BLOCK_V_ENV = "TRITON_KDA_SM90_BLOCK_V"
STATE_ENV = "TRITON_KDA_SM90_STATE"  # "mma": the recurrence on mma.sync where wgmma is the default (cc 9.0)
PIECES_ENV = "TRITON_KDA_SM90_PIECES"  # pieces of the pipelined forward (`pieces`); 1: the two launches in turn
TAPER_ENV = "TRITON_KDA_SM90_TAPER"  # each piece's size over the one before it (`taper`)
LONGEST_FIRST_ENV = "TRITON_KDA_SM90_LONGEST_FIRST"  # "0": the recurrence's CTAs in sequence order (`longest_first`)
BT = 16
D = 128
MAX_PIECES = 32  # kda_fwd.cu's MAX_PIECES
PIECE_TOKENS = 4096  # `pieces`: tokens a piece where the recurrence takes at most half the SMs


class FwdArgs(ctypes.Structure):
    """Mirror of ``FwdArgs`` in kda_fwd.cu (the library reports its size, checked at load)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in (
            "q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "cu_seqlens", "chunk_indices", "chunk_offsets",
            "o", "ht", "qg", "kg", "w", "u", "aqk", "decay", "hs", "seq_order")),
        *((name, ctypes.c_int64) for name in ("N", "TT", "NT", "H", "HV", "K", "V", "chunk_lo", "chunk_hi")),
        *((name, ctypes.c_float) for name in ("scale", "lower_bound", "beta_scale", "taper")),
        *((name, ctypes.c_int32) for name in (
            "gate", "l2norm", "beta_sigmoid", "g_fp32", "beta_fp32", "v_first", "block_v", "state_wgmma", "pieces")),
    ]


def verify(args: dict) -> tuple[bool, str]:
    """Whether this backend takes a ``chunk_kda`` call (``args``: see ``triton_kda.ops._backend_args``): in `scope`,
    and no faster in Triton's state pass (`triton_state_faster`)."""
    ok, why = scope(args)
    if not ok:
        return ok, why
    why = triton_state_faster(args)
    if why:
        return False, why
    return True, "bf16, K = V = 128, inference"


def scope(args: dict) -> tuple[bool, str]:
    """Whether the compiled kernels can serve a ``chunk_kda`` call (dtypes, sizes, alignment), with the reason."""
    if args["requires_grad"]:
        return False, "forward only: a backward may follow (grad mode on and an input requires grad)"
    if args["return_intermediate_states"]:
        return False, "return_intermediate_states is not supported"
    if args["dtype"] != torch.bfloat16:
        return False, f"q/k/v must be bfloat16, got {args['dtype']}"
    if args["K"] != D or args["V"] != D:
        return False, f"needs K = V = {D}, got K={args['K']} V={args['V']}"
    if args["g"].dtype not in (torch.bfloat16, torch.float32):
        return False, f"g must be bfloat16 or float32, got {args['g'].dtype}"
    if args["HV"] > 65535:
        return False, f"HV={args['HV']} exceeds the grid limit 65535"
    for name, align in (("q", 16), ("k", 16), ("v", 16), ("g", 16), ("beta", 4)):
        t = args[name]
        if t.is_contiguous() and t.data_ptr() % align:
            return False, f"{name}'s data pointer is not {align}-byte aligned"
    return True, "bf16, K = V = 128, inference"


def triton_state_faster(args: dict) -> str:
    """Why Triton's 64-token state pass beats this backend's recurrence on a call in its scope, or "" where it does
    not (measured on GPUs; the CPU interpreter has no SM count: "" there). `sm90_split` takes these calls."""
    if not args["q"].is_cuda:
        return ""
    lens = _lens(args)
    wgmma = state_wgmma(args["q"].device)
    if piece_chunks(lens, args["chunk_size"], args["HV"], D, D, 2, args["q"].device) > 0 and (
            not wgmma or _split_beats_wgmma(lens)):
        # measured: with few heads and long sequences Triton's chunk-parallel state passing (its planner splits
        # these sequences) is faster than this backend's serial recurrence (mma.sync: every such call, H100,
        # docs/benchmarks/runs/2026-11-22_reports/H100_sm90.md; wgmma: `_split_beats_wgmma`)
        return (f"Triton's intra-card chunk-parallel state passing is faster here (N*HV = {args['N'] * args['HV']}, "
                f"sequences split into pieces)")
    if not wgmma and _few_programs(lens, args["HV"], sm_count(args["q"].device)):
        return (f"Triton's 64-token state pass is faster here (N*HV = {args['N'] * args['HV']}: at most half the SMs "
                f"busy in this backend's 16-token mma.sync recurrence, a sequence of >= {FEW_MIN_TOKENS} tokens)")
    return ""


FEW_MIN_TOKENS = 4096  # the shortest longest-sequence for which `_few_programs` hands a call to Triton
SPLIT_WGMMA_TOKENS = 8192  # `_split_beats_wgmma`: the longest sequence for which the wgmma recurrence was measured
                           # faster than Triton's split sequences


def _split_beats_wgmma(lens: tuple) -> bool:
    """Where Triton splits the sequences into pieces, whether its pass beats the wgmma recurrence: past 8192 tokens.
    H200, bf16 Kimi flags, no_grad, this backend's time / Triton's (`few_heads.py`, docs/benchmarks/runs/
    2026-11-29_state64 and 2026-11-29_intra64): up to 8192 tokens this backend's at every N HV measured (N HV = 1 / 2
    / 4 / 8 over 8192 tokens x0.89 / x0.54 / x0.56 / x0.94, N HV = 4 over 4096 x0.42, N HV = 16 over 8192 x0.78);
    past them Triton's (N HV = 2 / 8 over 16384 tokens x1.05 / x1.16, N HV = 8 over 32768 / 65536 x1.32 / x1.43),
    but for N HV = 4 over 16384 tokens (x0.92: 9% lost there)."""
    return max(lens) > SPLIT_WGMMA_TOKENS


def _few_programs(lens: tuple, HV: int, sms: int) -> bool:
    """Whether the mma.sync recurrence would run at most sms / 2 programs (32-wide V blocks: N HV D / 32) over a
    sequence of at least FEW_MIN_TOKENS tokens: its 16-token steps then take longer than Triton's serial pass over
    64-token chunks with as many programs. H100, bf16 Kimi flags, no_grad, Triton / this backend
    (docs/benchmarks/runs/2026-11-27_b1_forward): N HV = 16 at T = 4096 / 8192 / 16384 x0.90 / x0.89 / x0.90, N HV =
    8 at T = 4096 x0.78, but x1.44 at T = 2048 (fixed costs); N HV = 32 x1.10 (T = 8192). The wgmma recurrence
    (cc 9.0's default) beats Triton there: N HV = 16 over 4096-65536 tokens x1.32-1.36 (H200, 2026-11-29)."""
    return bool(lens) and 2 * state_ctas(len(lens), HV, 32) <= sms and max(lens) >= FEW_MIN_TOKENS


def _lens(args: dict) -> tuple:
    """Token count of each sequence of a call (host ints, from the CPU copy of cu_seqlens or from B and T)."""
    seqlens = args["seqlens_cpu"]
    return tuple((seqlens[1:] - seqlens[:-1]).tolist()) if seqlens is not None else (args["T"],) * args["B"]


def state_ctas(N: int, HV: int, bv: int = 64) -> int:
    """The recurrence's CTAs (programs): one per sequence, v-head and bv state columns."""
    return N * HV * (D // bv)


def state_wgmma(device: torch.device) -> bool:
    """Whether the recurrence runs on wgmma: on a compute capability 9.0 device (the sm_90a library; 64 state columns
    per program) unless ``TRITON_KDA_SM90_STATE=mma``; elsewhere on mma.sync."""
    mode = os.environ.get(STATE_ENV, "").strip()
    if mode not in ("", "mma", "wgmma"):
        raise ValueError(f"{STATE_ENV} must be 'mma' or 'wgmma', got {mode!r}")
    return mode != "mma" and torch.cuda.get_device_capability(device) == (9, 0)


def block_v(N: int, HV: int, device: torch.device) -> int:
    """State columns per program of the recurrence kernel: 32 (twice the programs) when 64-wide blocks would leave
    SMs idle, else 64; ``TRITON_KDA_SM90_BLOCK_V`` overrides."""
    forced = os.environ.get(BLOCK_V_ENV)
    if forced:
        if forced not in ("32", "64"):
            raise ValueError(f"{BLOCK_V_ENV} must be 32 or 64, got {forced!r}")
        return int(forced)
    return 64 if state_ctas(N, HV) >= sm_count(device) else 32


def pieces(lens: tuple, HV: int, wgmma: bool, sms: int) -> int:
    """Pieces of the pipelined forward: each sequence's 16-token chunks cut into this many pieces, the recurrence over
    piece p on a second stream beside the intra stage over piece p + 1 (`kda_fwd` in kda_fwd.cu); outputs bit-identical
    to one piece. Sequences of one length on the wgmma recurrence only; ``TRITON_KDA_SM90_PIECES`` overrides; never
    more pieces than chunks. By default, with C = N HV D / 64 recurrence CTAs: where C <= SMs / 2 (the intra stage
    beside the recurrence keeps whole SMs) over N HV T >= 2^17 token-heads, pieces of about PIECE_TOKENS tokens (T //
    4096, at least 2, at most 8: each piece boundary costs the recurrence's chain a launch, a state reload and a
    prologue, about 9 us); 3 where SMs / 2 < C <= SMs over >= 2^19; else 1 (with more CTAs than SMs the pieces only add
    boundaries). H200, bf16 Kimi flags, no_grad, h0 / ht, medians of 3-5 alternating timings (docs/benchmarks/runs/
    2026-11-29_pieces), 1 piece -> the rule's: B1 T8192 H32 538 -> 484 us (2), B1 T8192 H16 420 -> 399 (2), B1 T16384
    H32 1038 -> 915 (4; 3: 909), B2 T16384 H16 1029 -> 918 (4; 3: 904), B1 T32768 H32 2027 -> 1689 (8); B2 T8192 H32
    771 -> 752 (3), B2 T8192 H16 HV32 761 -> 734 (3); one piece kept at B1 T8192 H8 (355 / 360 at 1 / 2), B1 T8192 H96
    (1095 / 1084 / 1085 at 1 / 2 / 3, within the noise), B2 T8192 H64, B4 T4096 H32 and B8 T2048 H32 (2 pieces 4-8%
    slower there); the T = 4096 rows' times vary call to call by more than their differences."""
    forced = os.environ.get(PIECES_ENV, "").strip()
    if forced and not (forced.isdigit() and 1 <= int(forced) <= MAX_PIECES):
        raise ValueError(f"{PIECES_ENV} must be an integer from 1 to {MAX_PIECES}, got {forced!r}")
    if not wgmma or not lens or min(lens) != max(lens):
        return 1
    ctas, work = state_ctas(len(lens), HV), len(lens) * HV * lens[0]
    if forced:
        P = int(forced)
    elif 2 * ctas <= sms and work >= 1 << 17:
        P = min(8, max(2, lens[0] // PIECE_TOKENS))
    elif ctas <= sms and work >= 1 << 19:
        P = 3
    else:
        P = 1
    return max(1, min(P, -(-lens[0] // BT)))


def taper(P: int, HV: int, N: int, sms: int) -> float:
    """Each piece's size over the one before it in the pipelined forward of P pieces (1: equal pieces; above 1 the
    first pieces, whose intra stage runs alone at the start, are the shorter); ``TRITON_KDA_SM90_TAPER`` (0.25 to 4)
    overrides. By default 1.5 over 2 pieces and 1.2 over more where the recurrence's N HV D / 64 CTAs take at most half
    the SMs (there the recurrence is the long pole), else 1. H200, bf16 Kimi flags, three alternating timings
    (docs/benchmarks/runs/2026-11-29_pieces, calls 10, 11): B1 T8192 H32 2 pieces 497 -> 486 us (0.67: 530), B1
    T16384 H32 4 pieces 907 -> 858, B1 T32768 H32 8 pieces 1679 -> 1615 (0.85: 1729); with 128 CTAs 3 pieces at 0.5 /
    0.7 gained at most 0.5% (B2 T8192 H32 743 -> 740 / 748)."""
    forced = os.environ.get(TAPER_ENV, "").strip()
    if not forced:
        if 2 * state_ctas(N, HV) > sms:
            return 1.0
        return 1.5 if P == 2 else 1.2
    try:
        value = float(forced)
    except ValueError:
        value = math.nan
    if not 0.25 <= value <= 4.0:
        raise ValueError(f"{TAPER_ENV} must be a number from 0.25 to 4, got {forced!r}")
    return value


def longest_first(plan, device: torch.device) -> torch.Tensor | None:
    """The order in which the recurrence's CTAs take the sequences: [N] int32 on ``device``, the longest first (ties
    in sequence order), or None (sequence order) where it is already non-increasing or ``TRITON_KDA_SM90_LONGEST_FIRST
    =0``. Its CTAs are dispatched rank by rank, every head of a rank together (`state_cta` in kda_fwd.cu): the long
    chains start first and the short sequences fill the SMs beside them, instead of the last heads' long chains
    starting after every earlier head's short ones. Any order gives the same bits (a CTA's work does not depend on
    when it runs). From the host lengths (cached by content), or during CUDA-graph capture from the device copy of
    cu_seqlens (the graph then orders each replay's sequences). H200, bf16 Kimi flags, h0 / ht, sequence order ->
    longest first (docs/benchmarks/runs/2026-11-29_order): varlen rand20 H32 799 -> 706 us, TLE's batch H96 1094 ->
    1025; uniform10 and skewed (8192 + 64 x 128 tokens) unchanged (729, 1015)."""
    mode = os.environ.get(LONGEST_FIRST_ENV, "").strip()
    if mode not in ("", "0", "1"):
        raise ValueError(f"{LONGEST_FIRST_ENV} must be 0 or 1, got {mode!r}")
    lens = plan.lens
    if mode == "0" or all(a >= b for a, b in itertools.pairwise(lens)):
        return None
    if capturing(device):
        cu = plan.cu_seqlens
        return torch.argsort(cu[1:] - cu[:-1], descending=True, stable=True).to(torch.int32)
    return _host_order(lens, device)


@functools.lru_cache(maxsize=64)
def _host_order(lens: tuple, device: torch.device) -> torch.Tensor:
    order = sorted(range(len(lens)), key=lambda i: -lens[i])
    return torch.tensor(order, dtype=torch.int32).to(device, non_blocking=True)


class Workspace(NamedTuple):
    """The intra stage's outputs, chunk-padded and head-major (rows past a sequence end are zero); NT counts
    16-token chunks (``triton_kda.chunk_fwd.plan_chunks`` with BT = 16)."""
    qg: torch.Tensor     # [HV, NT, 16, K] bf16: scale * q * exp(G)
    kg: torch.Tensor     # [HV, NT, 16, K] bf16: k * exp(G_last - G)
    w: torch.Tensor      # [HV, NT, 16, K] bf16: Akk (beta * k * exp(G))
    u: torch.Tensor      # [HV, NT, 16, V] bf16: Akk (beta * v)
    aqk: torch.Tensor    # [HV, NT, 16, 16] bf16: scale * q_i k_j exp(G_i - G_j), j <= i
    decay: torch.Tensor  # [HV, NT, K] fp32: exp(G_last)


def buffer(shape: tuple, poison: bool, **kw) -> torch.Tensor:
    """An output buffer: NaN-filled with ``poison`` (tests: elements a kernel must write), else uninitialised."""
    return torch.full(shape, math.nan, **kw) if poison else torch.empty(shape, **kw)


def input_fields(q, k, v, g, beta, A_log, dt_bias, scale: float, flags: dict) -> tuple[tuple, dict]:
    """The inputs' part of an argument block (``FwdArgs`` and ``sm90_v2.Intra64Args`` name these fields alike): the
    tensors the pointers address (contiguous, A_log / dt_bias flattened to fp32; the caller keeps them alive over the
    call) and the fields, with the scale and chunk_kda's flags as the kernels read them."""
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    a_log = A_log.reshape(-1).float().contiguous() if A_log is not None else None
    bias = dt_bias.reshape(-1).float().contiguous() if dt_bias is not None else None
    lower_bound = flags["lower_bound"]
    fields = dict(
        q=_ptr(q), k=_ptr(k), v=_ptr(v), g=_ptr(g), beta=_ptr(beta), A_log=_ptr(a_log), dt_bias=_ptr(bias),
        scale=scale, lower_bound=lower_bound if lower_bound is not None else 0.0,
        beta_scale=2.0 if flags["allow_neg_eigval"] else 1.0, gate=gate_mode(flags["use_gate_in_kernel"], lower_bound),
        l2norm=int(flags["use_qk_l2norm_in_kernel"]), beta_sigmoid=int(flags["use_beta_sigmoid_in_kernel"]),
        g_fp32=int(g.dtype == torch.float32), beta_fp32=int(beta.dtype == torch.float32),
    )
    return (q, k, v, g, beta, a_log, bias), fields


class FwdOut(NamedTuple):
    o: torch.Tensor                    # [B, T, HV, V] bf16
    final_state: torch.Tensor | None   # [N, HV, K, V] fp32 ([N, HV, V, K] V-first)
    workspace: Workspace


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, *, cu_seqlens=None, out=None,
            final_state=None, poison_workspace=False) -> FwdOut:
    """The forward on [B, T, ...] tensors (p: the validated ``KDAProblem``, flags: ``chunk_kda``'s options;
    cu_seqlens: the device copy of the boundaries, from which a varlen plan is built during CUDA-graph capture).

    ``out`` / ``final_state`` may be given (tests pass NaN-filled buffers to catch unwritten elements);
    ``poison_workspace`` fills the intermediate workspaces with NaN first (tests)."""
    B, T, HV, V = v.shape
    dev = q.device
    lib = entry_for(dev, "kda_fwd", FwdArgs)
    plan = plan_chunks(B, T, BT, dev, p.seqlens_cpu, cu_seqlens)
    NT = plan.NT
    bf16 = dict(device=dev, dtype=torch.bfloat16)
    qg, kg, w, u = (buffer((HV, NT, BT, D), poison_workspace, **bf16) for _ in range(4))
    aqk = buffer((HV, NT, BT, BT), poison_workspace, **bf16)
    decay = buffer((HV, NT, D), poison_workspace, device=dev, dtype=torch.float32)
    o = torch.empty_like(v) if out is None else out
    ht = None
    if flags["output_final_state"]:
        ht = torch.empty(p.N, HV, D, D, device=dev, dtype=torch.float32) if final_state is None else final_state
    keep, fields = input_fields(q, k, v, g, beta, A_log, dt_bias, p.scale, flags)  # keep: alive over the launch
    h0 = initial_state.contiguous() if initial_state is not None else None
    wg = state_wgmma(dev)
    sms = sm_count(dev)
    P = pieces(plan.lens, HV, wg, sms)
    hs = torch.empty(p.N, HV, D, D, device=dev, dtype=torch.float32) if P > 1 else None
    order = longest_first(plan, dev)
    args = FwdArgs(
        **fields, h0=_ptr(h0), cu_seqlens=_ptr(plan.cu_seqlens), chunk_indices=_ptr(plan.chunk_indices),
        chunk_offsets=_ptr(plan.chunk_offsets), o=_ptr(o), ht=_ptr(ht),
        qg=_ptr(qg), kg=_ptr(kg), w=_ptr(w), u=_ptr(u), aqk=_ptr(aqk), decay=_ptr(decay), hs=_ptr(hs),
        seq_order=_ptr(order),
        N=p.N, TT=B * T, NT=NT, H=p.H, HV=HV, K=p.K, V=V, v_first=int(p.state_v_first),
        block_v=64 if wg else block_v(p.N, HV, dev), state_wgmma=int(wg), pieces=P,
        taper=taper(P, HV, p.N, sms) if P > 1 else 1.0,
    )
    with torch.cuda.device(dev):
        lib(args, torch.cuda.current_stream(dev).cuda_stream)
    return FwdOut(o, ht, Workspace(qg, kg, w, u, aqk, decay))


def chunk_kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
    """The registry's entry point (``triton_kda.ops`` documents the call); the plan comes from p's CPU copy of
    cu_seqlens."""
    out = kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, cu_seqlens=cu_seqlens)
    return out.o, out.final_state


BACKEND = compiled_backend(NAME, OP, ENV_SWITCH, verify, chunk_kda_fwd, "kda_fwd", FwdArgs)
