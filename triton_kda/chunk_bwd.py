"""Backward orchestration: the reverse state pass, the chunk-local backward, the GVA and parameter reductions.

Both stages are deterministic (no atomics): per-v-head partials of dq/dk and per-token partials of dA_log/ddt_bias
are written by the kernels and summed here with torch.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from triton_kda.chunk_fwd import ChunkPlan, IntraOut, _precision
from triton_kda.gate import gate_mode
from triton_kda.intra import intra_bwd
from triton_kda.state import state_bwd


class ChunkGrads(NamedTuple):
    """Gradients of one chunk_kda call, flattened to TT tokens, each in its input's dtype (dh0 fp32)."""
    dq: torch.Tensor                # [TT, H, K]
    dk: torch.Tensor                # [TT, H, K]
    dv: torch.Tensor                # [TT, HV, V]
    dg: torch.Tensor                # [TT, HV, K], w.r.t. the gate input the caller passed
    dbeta: torch.Tensor             # [TT, HV], w.r.t. the beta the caller passed
    dA_log: torch.Tensor | None     # shape of A_log
    ddt_bias: torch.Tensor | None   # shape of dt_bias
    dh0: torch.Tensor | None        # [N, HV, K, V] fp32 ([N, HV, V, K] with state_v_first)


def chunk_bwd(do, dht, q, k, v, g, beta, A_log, dt_bias, intra: IntraOut, h, v_new, plan: ChunkPlan, BT: int,
              scale: float, *, use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool, lower_bound: float | None,
              use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, state_v_first: bool,
              want_dh0: bool) -> ChunkGrads:
    """Gradients of chunk_kda from the forward's intermediates.

    do: [TT, HV, V]; dht: None or [N, HV, K, V] fp32 (V-first with state_v_first); q, k: [TT, H, K];
    v: [TT, HV, V]; g: [TT, HV, K]; beta: [TT, HV] (all contiguous); A_log [HV] / dt_bias [HV * K] or None;
    intra: the intra-stage outputs; h: [NT, HV, K, V] fp32 state at each chunk start (V-first with
    state_v_first); v_new: [TT, HV, V].
    """
    TT, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    prec = _precision(q.dtype)
    st = state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, do, dht, plan, BT, V, want_dh0=want_dh0,
                   state_v_first=state_v_first, prec=prec)
    gate = gate_mode(use_gate_in_kernel, lower_bound)
    it = intra_bwd(q, k, v, g, beta, A_log, dt_bias, intra.gcum, intra.rstd_q, intra.rstd_k, intra.beta,
                   intra.Akk, h, st.dh, v_new, st.dv_new, do, scale, plan, BT,
                   use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, gate=gate, lower_bound=lower_bound,
                   use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                   state_v_first=state_v_first, prec=prec)
    G = HV // H
    dA_log = ddt_bias = None
    if gate > 0 and A_log is not None:
        dA_log = it.dA_log_rows.sum(0).reshape(A_log.shape).to(A_log.dtype)
    if gate > 0 and dt_bias is not None:
        ddt_bias = it.dg.sum(0).reshape(dt_bias.shape).to(dt_bias.dtype)
    return ChunkGrads(
        dq=it.dq.view(TT, H, G, K).sum(2).to(q.dtype),
        dk=it.dk.view(TT, H, G, K).sum(2).to(k.dtype),
        dv=it.dv,
        dg=it.dg.to(g.dtype),
        dbeta=it.dbeta.to(beta.dtype),
        dA_log=dA_log,
        ddt_bias=ddt_bias,
        dh0=st.dh0,
    )
