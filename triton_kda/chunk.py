"""The public `chunk_kda` (a drop-in replacement for `fla.ops.kda.chunk_kda`) and its autograd Function.

After validating its inputs (always: no backend skips it), `chunk_kda` asks the `cuda_fast` registry which backend
serves op ``chunk_kda_fwd`` on q's device, passing its verifiers the dict built by `_backend_args`. A compiled
backend chosen there is called as

    fn(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, problem, flags)

with q, k, v, g, beta, initial_state and cu_seqlens as the caller gave them (validated, layout untouched), A_log and
dt_bias as resolved by validation (None unless ``use_gate_in_kernel``), ``problem`` the `KDAProblem` (sizes, scale,
state layout, the checked CPU copy of cu_seqlens) and ``flags`` the dict of every boolean option plus
``lower_bound``; it returns exactly what `chunk_kda` returns. When the verifier's ``requires_grad`` is True its
outputs must carry the autograd graph (a forward-only backend's verifier declines those calls). Otherwise the Triton
path runs.
"""
from __future__ import annotations

import torch

import cuda_fast
from triton_kda._validate import KDAProblem, validate_chunk_kda
from triton_kda.chunk_bwd import chunk_bwd
from triton_kda.chunk_fwd import IntraOut, intra_stage, plan_chunks, saved_intermediates, state_fwd, wy_recompute
from triton_kda.cp import chunk_kda_cp
from triton_kda.state import grad_state_dtype


def _flat(x: torch.Tensor) -> torch.Tensor:
    """[B, T, ...] -> [B*T, ...], contiguous."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]).contiguous()


def _stages(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, plan, *, output_final_state: bool,
            store_h: bool, store_v_new: bool, h_dtype: torch.dtype, store_aux: bool):
    """Run the intra and state forward stages on [B, T, ...] inputs; returns (IntraOut, StateOut)."""
    BT = p.chunk_size
    intra = intra_stage(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, BT, flags, store_aux=store_aux)
    st = state_fwd(intra, initial_state.contiguous() if initial_state is not None else None, plan, BT, v.shape[-1],
                   output_final_state=output_final_state, state_v_first=p.state_v_first, store_h=store_h,
                   store_v_new=store_v_new, h_dtype=h_dtype)
    return intra, st


BACKEND_OP = "chunk_kda_fwd"


def _backend_args(q, k, v, g, beta, initial_state, cu_seqlens, p: KDAProblem, flags: dict) -> dict:
    """What a backend's verifier sees: the tensors, every field of ``p`` (B, T, H, HV, K, V, N, chunk_size, scale,
    A_log, dt_bias, state_v_first, seqlens_cpu), every flag, ``dtype`` (q's), ``varlen`` and ``requires_grad``
    (grad mode is on and an input requires grad). Host-side only: no device sync."""
    inputs = (q, k, v, g, beta, p.A_log, p.dt_bias, initial_state)
    return dict(p._asdict(), **flags, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state,
                cu_seqlens=cu_seqlens, dtype=q.dtype, varlen=cu_seqlens is not None,
                requires_grad=torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs))


class ChunkKDAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, seqlens_cpu, grad):
        B, T, HV, V = v.shape
        plan = plan_chunks(B, T, p.chunk_size, q.device, seqlens_cpu)
        # grad: a backward may follow (grad mode was on and an input requires grad; ctx.needs_input_grad ignores the
        # grad mode). The forward then saves, as fla's does, Aqk, Akk, the row norms and the activated beta (the
        # backward recomputes w, u, qg, kg and the states from them); disable_recompute keeps every intermediate
        # (h in grad_state_dtype) instead
        keep = flags["disable_recompute"] and grad
        return_h = flags["return_intermediate_states"]
        intra, st = _stages(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, plan,
                            output_final_state=flags["output_final_state"], store_h=return_h or keep,
                            store_v_new=keep, h_dtype=grad_state_dtype(q.dtype) if keep else q.dtype,
                            store_aux=grad)
        saved = saved_intermediates(intra, st, keep=keep, grad=grad)
        ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, initial_state, *saved)
        ctx.p, ctx.flags, ctx.seqlens_cpu, ctx.keep = p, flags, seqlens_cpu, keep
        o = st.o.view(B, T, HV, V)
        if return_h:
            h = st.h.to(q.dtype).view(B if seqlens_cpu is None else 1, -1, *st.h.shape[1:])
            ctx.mark_non_differentiable(h)
            return o, st.final_state, h
        return o, st.final_state

    @staticmethod
    def backward(ctx, do, dht, *unused):
        q, k, v, g, beta, A_log, dt_bias, initial_state, *kept = ctx.saved_tensors
        p, flags = ctx.p, ctx.flags
        B, T, HV, V = v.shape
        BT = p.chunk_size
        plan = plan_chunks(B, T, BT, q.device, ctx.seqlens_cpu)
        a_log = A_log.reshape(-1) if A_log is not None else None
        dt = dt_bias.reshape(-1) if dt_bias is not None else None
        if ctx.keep:
            intra, h, v_new = IntraOut(*kept[:-2]), kept[-2], kept[-1]
        else:
            intra = wy_recompute(_flat(q), _flat(k), _flat(v), _flat(g), a_log, dt, *kept, p.scale, plan, BT,
                                 use_gate_in_kernel=flags["use_gate_in_kernel"], lower_bound=flags["lower_bound"])
            st = state_fwd(intra, initial_state.contiguous() if initial_state is not None else None, plan, BT, V,
                           output_final_state=False, state_v_first=p.state_v_first, store_h=True, store_v_new=True,
                           h_dtype=grad_state_dtype(q.dtype))
            h, v_new = st.h, st.v_new
        gr = chunk_bwd(
            _flat(do), dht.contiguous() if dht is not None else None, _flat(q), _flat(k), _flat(v), _flat(g),
            _flat(beta), a_log, dt, intra, h, v_new, plan, BT, p.scale,
            use_qk_l2norm_in_kernel=flags["use_qk_l2norm_in_kernel"], use_gate_in_kernel=flags["use_gate_in_kernel"],
            lower_bound=flags["lower_bound"], use_beta_sigmoid_in_kernel=flags["use_beta_sigmoid_in_kernel"],
            allow_neg_eigval=flags["allow_neg_eigval"], state_v_first=p.state_v_first,
            want_dh0=initial_state is not None,
        )
        return (gr.dq.view_as(q), gr.dk.view_as(k), gr.dv.view_as(v), gr.dg.view_as(g), gr.dbeta.view_as(beta),
                gr.dA_log.view_as(A_log) if gr.dA_log is not None else None,
                gr.ddt_bias.view_as(dt_bias) if gr.ddt_bias is not None else None, gr.dh0, None, None, None, None)


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
            which spares a device sync.
        cp_context: context parallel across ranks: a context from `triton_kda.build_cp_context` (or fla's); q..beta
            are then this rank's slice ``[1, T / W, ...]`` of the global batch, the context's local boundaries
            replace cu_seqlens, and initial / final states are per global sequence (``triton_kda/cp.py``).
        kwargs: ``A_log`` (``[HV]``), ``dt_bias`` (``[HV * K]``) for the in-kernel gate; ``chunk_size`` 32 or 64.

    Returns:
        ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype, final_state ``[N, HV, K, V]`` fp32 or None;
        with ``return_intermediate_states`` (inference mode) also ``h`` ``[B, NT, HV, K, V]``, the state at
        each chunk start, in q's dtype.
    """
    p = validate_chunk_kda(
        q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel,
        use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, disable_recompute,
        return_intermediate_states, state_v_first, cu_seqlens, cu_seqlens_cpu, cp_context, use_graph, max_num_seqs,
        kwargs,
    )
    flags = dict(
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound if use_gate_in_kernel else None,
        disable_recompute=disable_recompute, return_intermediate_states=return_intermediate_states,
        safe_gate=safe_gate,
    )
    args = _backend_args(q, k, v, g, beta, initial_state, cu_seqlens, p, flags)
    if cp_context is not None:  # context parallel across ranks (cp.py): the Triton path, with its state exchange
        return chunk_kda_cp(q, k, v, g, beta, initial_state, p, flags, cp_context, args["requires_grad"])
    backend = cuda_fast.select(BACKEND_OP, args, q.device)
    if backend.fn is not None:
        return backend.fn(q, k, v, g, beta, p.A_log, p.dt_bias, initial_state, cu_seqlens, p, flags)
    return ChunkKDAFunction.apply(q, k, v, g, beta, p.A_log, p.dt_bias, initial_state, p, flags, p.seqlens_cpu,
                                  args["requires_grad"])
