"""The public `chunk_kda` (a drop-in replacement for `fla.ops.kda.chunk_kda`).

It validates its inputs on the host (always: no backend skips it; under torch.compile on fake tensors, where the
cu_seqlens values cannot be read and the op checks them when it runs), then calls the custom op
``triton_kda::chunk_kda_fwd`` (`triton_kda.ops`; eager calls on plain tensors run its code without the op's
dispatch, through `ops.forward`), which picks a backend (`triton_kda.backends`) and runs the stages; autograd reaches
``triton_kda::chunk_kda_bwd``. The state-pool keywords (pool.py) are handled around the
op: the gather into its initial states before, the scatter of its final states after (so the op mutates nothing).
Context parallel across ranks (``cp_context``, cp.py) takes its own autograd Function instead of the op: the context
is not a tensor (no op schema can carry it) and its all-gathers run between the forward's and backward's stages.
"""
from __future__ import annotations

import torch

from triton_kda import ops
from triton_kda._validate import validate_chunk_kda
from triton_kda.cp import chunk_kda_cp
from triton_kda.pool import StatePool


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: float | None = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.LongTensor | None = None,
    cu_seqlens_cpu: torch.LongTensor | None = None,
    cp_context=None,
    use_graph: bool = False,
    max_num_seqs: int | None = None,
    **kwargs,
):
    r"""KDA (Kimi Delta Attention) over chunks; same signature, semantics and shapes as `fla.ops.kda.chunk_kda`.

    Args:
        q, k: ``[B, T, H, K]`` (bf16, fp16 or fp32; K <= 256).
        v: ``[B, T, HV, V]``, HV a multiple of H (GVA: v-head ``hv`` reads q/k head ``hv // (HV // H)``).
        g: ``[B, T, HV, K]`` log decay, or the raw gate input with ``use_gate_in_kernel``.
        beta: ``[B, T, HV]`` (post-sigmoid, or logits with ``use_beta_sigmoid_in_kernel``), fp32 or q's dtype.
        scale: multiplies q (after l2norm); defaults to ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` fp32 (``[N, HV, V, K]`` with ``state_v_first``).
        cu_seqlens: ``[N + 1]`` int32/int64 sequence boundaries (then B == 1); ``cu_seqlens_cpu`` its CPU copy,
            which spares a device sync (needed for CUDA-graph capture; fixed-length calls never sync).
        kwargs: ``A_log`` (``[HV]``), ``dt_bias`` (``[HV * K]``) for the in-kernel gate; ``chunk_size`` 32 or 64;
            ``ssm_state_indices``, ``inplace_final_state`` to prefill into a state pool (pool.py), the layout
            `fused_recurrent_kda` decodes from. With either, ``initial_state`` is the pool ``[num_slots, HV, K, V]``
            fp32 and ``ssm_state_indices`` ``[N]`` int32/int64 (on q's device) names each sequence's slot (without
            it, slot n is sequence n); a negative index is padding: that sequence starts from a zero state and its
            final state goes nowhere. Sequences start from their slots; with ``inplace_final_state`` their final
            states are written back into those slots (slots not named are never touched). Checked on the host
            (range, distinct live slots) before any launch; the pool takes no gradient. Not with ``cp_context``.
        cp_context: context parallel across ranks: a context from `triton_kda.build_cp_context` (or fla's); q..beta
            are then this rank's slice ``[1, T / W, ...]`` of the global batch, the context's local boundaries
            replace cu_seqlens, and initial / final states are per global sequence (``triton_kda/cp.py``).

    Returns:
        ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype, final_state ``[N, HV, K, V]`` fp32 or None;
        with ``return_intermediate_states`` (inference mode) also ``h`` ``[B, NT, HV, K, V]``, the state at
        each chunk start, in q's dtype. With ``inplace_final_state`` the second output is the pool itself (as fla's
        ``fused_recurrent_kda_fwd`` returns it), whatever ``output_final_state`` says.

    Works under ``torch.compile(fullgraph=True)`` (a custom op: no graph break) and inside CUDA graphs. With the
    pool keywords the pool's check, gather and scatter run eagerly around the op (graph breaks under compile, so
    not with ``fullgraph=True``). CP calls run eagerly under compile.
    """
    ssm_state_indices = kwargs.pop("ssm_state_indices", None)
    inplace_final_state = kwargs.pop("inplace_final_state", False)
    in_pool = ssm_state_indices is not None or inplace_final_state is not False
    if in_pool and cp_context is not None:
        raise ValueError(f"`ssm_state_indices` / `inplace_final_state` (state pools) cannot be combined with "
                         f"`cp_context` (context parallel), got cp_context={type(cp_context).__name__}; pass the "
                         f"initial states per global sequence instead.")
    p = validate_chunk_kda(
        q, k, v, g, beta, scale, None if in_pool else initial_state, output_final_state, use_qk_l2norm_in_kernel,
        use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, disable_recompute,
        return_intermediate_states, state_v_first, cu_seqlens, cu_seqlens_cpu, cp_context, use_graph, max_num_seqs,
        kwargs,
    )
    pool = None
    if in_pool:
        pool = StatePool(initial_state, ssm_state_indices, inplace_final_state, p, q.device)
        pool.load()
        initial_state, output_final_state = pool.h0, output_final_state or inplace_final_state
    inputs = (q, k, v, g, beta, p.A_log, p.dt_bias, initial_state)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
    lower_bound = float(lower_bound) if use_gate_in_kernel and lower_bound is not None else None
    options = (output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
               allow_neg_eigval, safe_gate, disable_recompute, return_intermediate_states)
    if cp_context is not None:
        return chunk_kda_cp(q, k, v, g, beta, initial_state, p, ops.kda_flags(lower_bound, *options), cp_context,
                            grad)
    o, final_state, h, _ = ops.forward(
        q, k, v, g, beta, p.A_log, p.dt_bias, initial_state, cu_seqlens,
        p.seqlens_cpu if p.seqlens_cpu is not None else cu_seqlens_cpu, p.scale, p.chunk_size, lower_bound,
        *options, p.state_v_first, grad,
    )
    final_state = final_state if output_final_state else None
    out = (o, final_state, h) if return_intermediate_states else (o, final_state)
    return out if pool is None else pool.store(out)
