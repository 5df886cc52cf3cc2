"""Forward orchestration: chunk plan, the intra-chunk launch, the state/output launch."""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton

from triton_kda.configs import (
    _kpad,
    arch_of,
    capturing,
    intra_candidates,
    intra_config,
    precision_of,
    state_candidates,
    state_config,
    tuned,
    wy_fwd_config,
)
from triton_kda.gate import GATE_LOWER_BOUND, gate_mode
from triton_kda.intra import RANGE_MAX, _kda_intra_fwd_kernel
from triton_kda.state import _kda_state_fwd_kernel
from triton_kda.state_cp import cp_initial_states, plan_pieces
from triton_kda.wy import _kda_wy_fwd_kernel


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
    """Chunk plan from the CPU copy of cu_seqlens (varlen; cached by content) or from (B, T); no device sync.
    During CUDA-graph capture a varlen plan is built on the device from `cu_seqlens` (the device copy) instead of
    being copied from the host (a cached host plan could be freed while the graph still reads it)."""
    if seqlens_cpu is not None:
        lens = tuple((seqlens_cpu[1:] - seqlens_cpu[:-1]).tolist())
        if cu_seqlens is not None and capturing(device):
            return _device_varlen_plan(cu_seqlens, lens, BT)
        return _varlen_plan(lens, BT, device)
    nt = triton.cdiv(T, BT)
    ar = torch.arange(B * nt, device=device, dtype=torch.int32)
    return ChunkPlan(
        cu_seqlens=torch.arange(0, B * T + 1, T, device=device, dtype=torch.int64),
        chunk_indices=torch.stack([ar // nt, ar % nt], 1),
        chunk_offsets=torch.arange(0, B * nt + 1, nt, device=device, dtype=torch.int64),
        N=B,
        NT=B * nt,
        lens=(T,) * B,
    )


class IntraOut(NamedTuple):
    Aqk: torch.Tensor               # [TT, HV, BT], scale included (bf16 for bf16 inputs, else fp32)
    w: torch.Tensor                 # [TT, HV, K]
    u: torch.Tensor                 # [TT, HV, V]
    qg: torch.Tensor                # [TT, HV, K]
    kg: torch.Tensor                # [TT, HV, K]
    gl: torch.Tensor                # [NT, HV, K] fp32: gate cumsum (log2 units) at each chunk's last token
    rstd_q: torch.Tensor | None     # [TT, HV] fp32 (ones without in-kernel l2norm) (aux)
    rstd_k: torch.Tensor | None     # [TT, HV] fp32 (aux)
    beta: torch.Tensor | None       # [TT, HV] fp32, activated (aux)
    Akk: torch.Tensor | None        # [TT, HV, BT] in Aqk's dtype, (I + L)^-1 (aux)


class StateOut(NamedTuple):
    o: torch.Tensor | None              # [TT, HV, V] in the input dtype
    final_state: torch.Tensor | None    # [N, HV, K, V] fp32 (V-first if asked)
    h: torch.Tensor | None              # [NT, HV, K, V] state at each chunk start
    v_new: torch.Tensor | None          # [TT, HV, V]


def intra_fwd(q, k, v, g, beta, A_log, dt_bias, scale: float, plan: ChunkPlan, BT: int, *,
              use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, lower_bound: float | None,
              use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, store_aux: bool = False) -> IntraOut:
    """q, k: [TT, H, K]; v: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV] (contiguous, flattened).
    store_aux also writes what the backward reuses (rstd_q, rstd_k, beta, Akk)."""
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    dev, dt = q.device, q.dtype
    arch = arch_of(dev)
    f32 = dict(device=dev, dtype=torch.float32)
    aux = store_aux
    a_dt = dt if dt == torch.bfloat16 else torch.float32
    out = IntraOut(
        Aqk=torch.empty(TT, HV, BT, device=dev, dtype=a_dt),
        w=torch.empty(TT, HV, K, device=dev, dtype=dt), u=torch.empty(TT, HV, V, device=dev, dtype=dt),
        qg=torch.empty(TT, HV, K, device=dev, dtype=dt), kg=torch.empty(TT, HV, K, device=dev, dtype=dt),
        gl=torch.empty(plan.NT, HV, K, **f32),
        rstd_q=torch.empty(TT, HV, **f32) if aux else None,
        rstd_k=torch.empty(TT, HV, **f32) if aux else None, beta=torch.empty(TT, HV, **f32) if aux else None,
        Akk=torch.empty(TT, HV, BT, device=dev, dtype=a_dt) if aux else None,
    )
    gate = gate_mode(use_gate_in_kernel, lower_bound)

    def launch(cfg):
        _kda_intra_fwd_kernel[(plan.NT, HV)](
            q, k, v, g, beta, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q,
            *(x if x is not None else out.gl for x in out), plan.cu_seqlens, plan.chunk_indices, scale,
            lower_bound if lower_bound is not None else 0.0,
            H=H, HV=HV, K=K, V=V, BT=BT, BC=cfg.BC, BK=cfg.BK, BV=cfg.BV,
            USE_L2NORM=use_qk_l2norm_in_kernel, GATE=gate, HAS_A_LOG=gate > 0 and A_log is not None,
            HAS_DT_BIAS=gate > 0 and dt_bias is not None, BETA_SIGMOID=use_beta_sigmoid_in_kernel,
            BETA_SCALE=2.0 if allow_neg_eigval else 1.0, STORE_AUX=store_aux, IS_BF16=dt == torch.bfloat16,
            PREC=precision_of(dt), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            # the lower-bound gate keeps every BC-row block's gate range under RANGE_MAX when
            # (BC - 1) |lower_bound| log2(e) does (safe gates: 108.2 < 110): no exact rows, no range check
            EXACT_ROWS=not (gate == GATE_LOWER_BOUND
                            and -lower_bound * (cfg.BC - 1) / math.log(2) <= RANGE_MAX.value - 1),
        )

    key = ("intra_fwd", arch, dt, K, V, BT, H, HV, triton.next_power_of_2(plan.NT), gate, store_aux)
    launch(tuned(key, intra_config(arch, K, V), intra_candidates(arch, K, V), launch))
    return out


def intra_stage(q, k, v, g, beta, A_log, dt_bias, scale: float, plan: ChunkPlan, BT: int, flags: dict, *,
                store_aux: bool) -> IntraOut:
    """`intra_fwd` on [B, T, ...] inputs (flattened here), A_log / dt_bias in any shape, with chunk_kda's flags."""
    return intra_fwd(q.flatten(0, 1).contiguous(), k.flatten(0, 1).contiguous(), v.flatten(0, 1).contiguous(),
                     g.flatten(0, 1).contiguous(), beta.flatten(0, 1).contiguous(),
                     A_log.reshape(-1) if A_log is not None else None,
                     dt_bias.reshape(-1) if dt_bias is not None else None,
                     scale, plan, BT, use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"],
                     use_gate_in_kernel=flags["use_gate_in_kernel"], lower_bound=flags["lower_bound"],
                     use_beta_sigmoid_in_kernel=flags["use_beta_sigmoid_in_kernel"],
                     allow_neg_eigval=flags["allow_neg_eigval"], store_aux=store_aux)


def saved_intermediates(intra: IntraOut, st: StateOut, *, keep: bool, grad: bool) -> tuple:
    """What a forward saves for its backward: every intermediate with `keep` (disable_recompute; then h and v_new
    last), else, where a backward can follow, what its recompute starts from (Aqk, the row norms, beta, Akk)."""
    if keep:
        return (*intra, st.h, st.v_new)
    if grad:
        return (intra.Aqk, intra.rstd_q, intra.rstd_k, intra.beta, intra.Akk)
    return ()


def wy_recompute(q, k, v, g, A_log, dt_bias, Aqk, rstd_q, rstd_k, beta_act, Akk, scale: float, plan: ChunkPlan,
                 BT: int, *, use_gate_in_kernel: bool, lower_bound: float | None) -> IntraOut:
    """The backward's recompute of `intra_fwd`'s outputs from what the forward saved (Aqk, rstd_q, rstd_k, beta_act,
    Akk: the aux outputs), bit for bit: launches `_kda_wy_fwd_kernel` on (NT, HV). q, k: [TT, H, K]; v: [TT, HV, V];
    g: [TT, HV, K] (contiguous, flattened); A_log [HV] and dt_bias [HV * K] or None."""
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    dev, dt = q.device, q.dtype
    cfg = wy_fwd_config(arch_of(dev), K, V)
    w, qg, kg = (torch.empty(TT, HV, K, device=dev, dtype=dt) for _ in range(3))
    u = torch.empty(TT, HV, V, device=dev, dtype=dt)
    gl = torch.empty(plan.NT, HV, K, device=dev, dtype=torch.float32)
    gate = gate_mode(use_gate_in_kernel, lower_bound)
    _kda_wy_fwd_kernel[(plan.NT, HV)](
        q, k, v, g, A_log if A_log is not None else q, dt_bias if dt_bias is not None else q, rstd_q, rstd_k,
        beta_act, Akk, w, u, qg, kg, gl, plan.cu_seqlens, plan.chunk_indices, scale,
        lower_bound if lower_bound is not None else 0.0,
        H=H, HV=HV, K=K, V=V, BT=BT, BK=cfg.BK, BV=cfg.BV, GATE=gate, HAS_A_LOG=gate > 0 and A_log is not None,
        HAS_DT_BIAS=gate > 0 and dt_bias is not None, IS_BF16=dt == torch.bfloat16, PREC=precision_of(dt),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return IntraOut(Aqk=Aqk, w=w, u=u, qg=qg, kg=kg, gl=gl, rstd_q=rstd_q, rstd_k=rstd_k, beta=beta_act, Akk=Akk)


def state_fwd(intra: IntraOut, initial_state, plan: ChunkPlan, BT: int, V: int, *, output_final_state: bool,
              state_v_first: bool, store_h: bool, store_v_new: bool, h_dtype: torch.dtype,
              store_o: bool = True) -> StateOut:
    """Launch `_kda_state_fwd_kernel` over the sequences (or their intra-card CP pieces). Without `store_o` (the
    backward's recompute of h and v_new) o is not formed: StateOut.o is None."""
    TT, HV, K = intra.w.shape
    dev, dt = intra.w.device, intra.w.dtype
    arch = arch_of(dev)
    o = torch.empty(TT if store_o else 0, HV, V, device=dev, dtype=dt)
    # intra-card CP: long sequences run as pieces, each from its start state (state_cp.py)
    pieces = plan_pieces(plan.lens, BT, HV, K, V, intra.w.element_size(), dev, seqs=plan)
    runs, h0 = plan, initial_state
    if pieces is not None:
        h0 = cp_initial_states(intra.kg, intra.w, intra.u, intra.gl, initial_state, plan, pieces, BT,
                               state_v_first=state_v_first, prec=precision_of(dt))
        runs = pieces
    shape = (runs.N, HV, V, K) if state_v_first else (runs.N, HV, K, V)
    ht = torch.empty(shape, device=dev, dtype=torch.float32) if output_final_state else None
    h = torch.empty(plan.NT, HV, *shape[2:], device=dev, dtype=h_dtype) if store_h else None
    v_new = torch.empty(TT, HV, V, device=dev, dtype=dt) if store_v_new else None

    def launch(cfg):
        _kda_state_fwd_kernel[(triton.cdiv(V, cfg.BV), runs.N, HV)](
            intra.qg, intra.kg, intra.w, intra.u, intra.Aqk, intra.gl,
            h0 if h0 is not None else o, o, ht if ht is not None else o,
            h if h is not None else o, v_new if v_new is not None else o,
            runs.cu_seqlens, runs.chunk_offsets,
            HV=HV, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=cfg.BV,
            HAS_H0=h0 is not None, STORE_O=store_o, STORE_HT=output_final_state, STORE_H=store_h,
            STORE_VNEW=store_v_new,
            V_FIRST=state_v_first, IS_BF16=dt == torch.bfloat16, PREC=precision_of(dt),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )

    es = intra.w.element_size()
    key = ("state_fwd", arch, dt, K, V, BT, HV, triton.next_power_of_2(runs.N), store_o, store_h, store_v_new)
    launch(tuned(key, state_config(arch, K, V, es), state_candidates(arch, K, V, es), launch))
    if pieces is not None and ht is not None:
        ht = ht[pieces.last]
    return StateOut(o if store_o else None, ht, h, v_new)
