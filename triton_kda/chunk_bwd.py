"""Backward orchestration: the gate cumsum, the reverse state pass, the WY and chunk-local backward, the GVA and
parameter reductions.

Every stage is deterministic (no atomics): per-v-head partials of dq/dk are summed over each GVA group by
`qk_bwd` (which also applies the l2norm backward), per-chunk and per-K-slice partials of
dbeta/dA_log/ddt_bias by torch.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from triton_kda.chunk_fwd import ChunkPlan
from triton_kda.configs import bwd_precision_of, precision_of
from triton_kda.gate import gate_cumsum, gate_mode
from triton_kda.intra import intra_bwd
from triton_kda.qk import qk_bwd
from triton_kda.state import state_bwd
from triton_kda.wy import IntraOut, wy_bwd


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
    intra: the intra-stage outputs; h: [NT, HV, K, V] state at each chunk start (grad_state_dtype; V-first with
    state_v_first); v_new: [TT, HV, V].
    """
    V = v.shape[2]
    gate = gate_mode(use_gate_in_kernel, lower_bound)
    bp = bwd_precision_of(q.dtype, gate)
    prec = bp.products

    @functools.cache
    def Gc() -> torch.Tensor:
        """The gate cumsum as the forward computed it (its precision rule), the products at the backward's; computed
        once, and only where a kernel reads it (the compiled chunk-local backward forms its own)."""
        return gate_cumsum(g, A_log, dt_bias, plan, BT, gate=gate, lower_bound=lower_bound, prec=precision_of(q.dtype))

    dh, dv_new, dh0 = state_bwd(intra.qg, intra.kg, intra.w, intra.Aqk, intra.gl, intra.rs, do, dht, plan, BT, V,
                                want_dh0=want_dh0, state_v_first=state_v_first, prec=prec)
    wy = wy_bwd(k, v, Gc, intra.rstd_k, intra.beta, intra.Akk, h, v_new, dv_new, do, plan, BT,
                state_v_first=state_v_first, prec=prec)
    del dv_new  # [TT, HV, V] fp32: freed before the chunk-local stage's buffers are allocated
    it = intra_bwd(q, k, g, A_log, dt_bias, Gc, intra.gl, intra.rstd_q, intra.rstd_k, intra.beta, h, dh, v_new, wy,
                   do, scale, plan, BT, gate=gate, lower_bound=lower_bound, state_v_first=state_v_first, prec=bp.intra,
                   prec_state=bp.intra_state, span=bp.gate_span, l2norm=use_qk_l2norm_in_kernel)
    dbeta = wy.dbeta + it.dbeta.sum(0)
    if use_beta_sigmoid_in_kernel:
        # beta_act = s * sigmoid(x): d/dx = beta_act (1 - beta_act / s)
        s = 2.0 if allow_neg_eigval else 1.0
        dbeta = dbeta * intra.beta * (1.0 - intra.beta / s)
    return ChunkGrads(
        dq=it.dq if it.qk_final else qk_bwd(q, it.dq, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel),
        dk=it.dk if it.qk_final else qk_bwd(k, it.dk, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel),
        dv=wy.dv,
        dg=it.dg,
        dbeta=dbeta.to(beta.dtype),
        dA_log=it.dA_log_part.sum((0, 1)).reshape(A_log.shape).to(A_log.dtype) if it.dA_log_part is not None else None,
        ddt_bias=(it.ddt_bias_part.sum(0).reshape(dt_bias.shape).to(dt_bias.dtype)
                  if it.ddt_bias_part is not None else None),
        dh0=dh0,
    )
