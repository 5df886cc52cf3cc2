"""`fused_recurrent_kda`: KDA token by token for decode and serving (fla's signature, with state pools and
autograd) on the kernels of recurrent.py. A call without autograd is validated in full once per call signature
(shapes, strides, dtypes, devices, flags, scale, lower_bound: `_signature`), whose `_FwdPlan` is kept (at most
`_MAX_PLANS`; `clear_plans` forgets them); a later call with that signature only checks tensor contents and goes to
recurrent.py's `_launch_fwd`, which on a GPU launches the compiled kernel directly, past Triton's binder
(`FAST_PATH = False` turns the plans off: benchmarks compare). Calls whose inputs require grad take
`FusedRecurrentKDAFunction` (`recurrent_fwd` forward, `recurrent_bwd` backward).
"""
from __future__ import annotations

import torch

from triton_kda._validate_recurrent import check_recurrent_contents, validate_fused_recurrent_kda
from triton_kda.gate import gate_mode
from triton_kda.recurrent import _FwdPlan, _launch_fwd, recurrent_bwd, recurrent_fwd

__all__ = ["fused_recurrent_kda"]


class FusedRecurrentKDAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, A_log, dt_bias, h0, indices, num_accepted, cu_seqlens, p, flags,
                output_final_state):
        o, ht = recurrent_fwd(q, k, v, g, beta, h0, indices, num_accepted, cu_seqlens, p, flags, inplace=False,
                              output_final_state=output_final_state)
        ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, h0, indices, num_accepted, cu_seqlens)
        ctx.p, ctx.flags = p, flags
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, beta, A_log, dt_bias, h0, indices, num_accepted, cu_seqlens = ctx.saved_tensors
        dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0 = recurrent_bwd(
            q, k, v, g, beta, h0, indices, num_accepted, cu_seqlens, do.contiguous(),
            dht.contiguous() if dht is not None else None, ctx.p, ctx.flags,
            want_dh0=h0 is not None and ctx.needs_input_grad[7])
        if dA_log is not None:
            dA_log = dA_log.reshape(A_log.shape).to(A_log.dtype)
        if ddt_bias is not None:
            ddt_bias = ddt_bias.reshape(dt_bias.shape).to(dt_bias.dtype)
        return dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0, None, None, None, None, None, None


FAST_PATH = True  # False: every call validates in full and launches through Triton's binder (benchmarks compare)
_MAX_PLANS = 4096
_PLANS: dict[tuple, _FwdPlan] = {}


def clear_plans() -> None:
    """Forget the plans kept per call signature (e.g. after changing `recurrent_fwd_config`)."""
    _PLANS.clear()


def _signature(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, lower_bound, cu_seqlens, indices,
               num_accepted, out, cu_seqlens_cpu, kwargs: dict, flags: tuple) -> tuple | None:
    """The key under which `fused_recurrent_kda` keeps a call's validated `_FwdPlan`: all that its validation and
    launch read except tensor contents and addresses (each tensor's shape, dtype and device, the strides the kernel
    takes, the flags, scale, lower_bound and the keyword names). None for calls that take the full path every time:
    inputs that require grad (autograd), a scale given as a tensor, flags that are not bools or tensor arguments
    that are not tensors (validation rejects them), the deprecated transpose_state_layout (it warns per call), and
    torch.compile tracing."""
    if "transpose_state_layout" in kwargs or torch.compiler.is_compiling():
        return None
    for f in flags:
        if f.__class__ is not bool:
            return None
    for x in (scale, lower_bound):
        if x is not None and x.__class__ is not float and x.__class__ is not int:
            return None
    gate = flags[2]
    if not gate:
        A_log = dt_bias = None
    Tensor = torch.Tensor
    for t in (q, k, v, g, beta):
        if not isinstance(t, Tensor):
            return None
    for t in (A_log, dt_bias, initial_state, cu_seqlens, indices, num_accepted, out):
        if t is not None and not isinstance(t, Tensor):
            return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or g.requires_grad
                                    or beta.requires_grad or (A_log is not None and A_log.requires_grad)
                                    or (dt_bias is not None and dt_bias.requires_grad)
                                    or (initial_state is not None and initial_state.requires_grad)):
        return None
    return (flags, scale, lower_bound, tuple(kwargs), cu_seqlens_cpu is None,
            q.shape, q.dtype, q.device, k.shape, k.dtype, k.device, v.shape, v.dtype, v.device,
            g.shape, g.dtype, g.device, beta.shape, beta.dtype, beta.device,
            None if A_log is None else (A_log.shape, A_log.dtype, A_log.device),
            None if dt_bias is None else (dt_bias.shape, dt_bias.dtype, dt_bias.device),
            None if initial_state is None else (initial_state.shape, initial_state.stride(), initial_state.dtype,
                                                initial_state.device),
            None if cu_seqlens is None else (cu_seqlens.shape, cu_seqlens.dtype, cu_seqlens.device),
            None if indices is None else (indices.shape, indices.stride(), indices.dtype, indices.device),
            None if num_accepted is None else (num_accepted.shape, num_accepted.dtype, num_accepted.device),
            None if out is None else (out.shape, out.dtype, out.device, out.is_contiguous()))


def fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: float | None = None,
    state_v_first: bool = False,
    cu_seqlens: torch.LongTensor | None = None,
    **kwargs,
):
    r"""KDA by its token recurrence (decode, serving, short sequences); the signature and semantics of
    `fla.ops.kda.fused_recurrent_kda`, plus the serving keywords of fla's ``fused_recurrent_kda_fwd`` and autograd.

    Args:
        q, k: ``[B, T, H, K]`` (bf16, fp16 or fp32; K <= 256).
        v: ``[B, T, HV, V]``, HV a multiple of H (GVA: v-head ``hv`` reads q/k head ``hv // (HV // H)``).
        g: ``[B, T, HV, K]`` log decay, or the raw gate input with ``use_gate_in_kernel``.
        beta: ``[B, T, HV]`` (post-sigmoid, or logits with ``use_beta_sigmoid_in_kernel``), fp32 or q's dtype.
        A_log, dt_bias: ``[HV]`` and ``[HV * K]`` elements, for the in-kernel gate (as in `chunk_kda`).
        scale: multiplies q (after l2norm); defaults to ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` fp32 (``[N, HV, V, K]`` with ``state_v_first``); with
            ``ssm_state_indices`` a state pool ``[num_slots, HV, K, V]`` (last three dims contiguous, any slot
            stride).
        cu_seqlens: ``[N + 1]`` int32/int64 sequence boundaries (then B == 1).
        kwargs: the serving keywords of fla's ``fused_recurrent_kda_fwd`` and a few of this project:

            - ``ssm_state_indices``: int32/int64 on q's device, ``[N]`` (sequence n reads, and with
              ``inplace_final_state`` writes, slot ``idx[n]``) or ``[N, S]`` (it reads slot
              ``idx[n, num_accepted_tokens[n] - 1]``, column 0 without num_accepted_tokens, and with
              ``inplace_final_state`` writes the state after its token t to slot ``idx[n, t]``). A negative read
              index is a padded entry: it starts from a zero state and writes no slot; a negative write entry skips
              that write. Slots not named are never touched.
            - ``num_accepted_tokens``: ``[N]`` int32/int64 in ``[1, S]``, accepted tokens of the last speculative
              step.
            - ``inplace_final_state`` (False): write the final states into ``initial_state`` (the pool; slot n of
              an ``[N, ...]`` state without indices) instead of returning new ones. Not with inputs that require
              grad.
            - ``out``: a preallocated output (contiguous, v's shape, q's dtype), e.g. for CUDA graphs.
            - ``cu_seqlens_cpu``: the CPU copy of cu_seqlens (spares a device sync where its contents are checked).
            - ``check_indices`` (True): check the contents of ssm_state_indices, num_accepted_tokens and cu_seqlens
              on the host before launching (range, distinct live slots, S long enough): one device->host copy when
              they live on the GPU. Skipped during CUDA-graph capture; serving loops that build their indices
              themselves pass False to save that copy. Unchecked indices outside the pool are treated as padding.
            - ``transpose_state_layout``: the deprecated name of state_v_first.

    Returns:
        ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype; final_state ``[N, HV, K, V]`` fp32 (``output_final_
        state``), else None; with ``inplace_final_state`` the pool itself (as fla's ``fused_recurrent_kda_fwd``
        returns it). Differentiable in q, k, v, g, beta, A_log, dt_bias and initial_state (a pool gets its gradient
        at the slots read, zeros elsewhere); deterministic.

    One launch per call, no host-device sync with ``check_indices=False`` (or cu_seqlens_cpu and no indices) and
    fixed shapes: safe to capture in a CUDA graph. Calls without autograd keep what their signature fixes (shapes,
    strides, dtypes, devices, flags, scale, lower_bound: the validated problem, launch configuration and, on a GPU,
    the compiled kernel, launched directly) for the next call with the same signature, which then only checks
    tensor contents (with ``check_indices``) before its launch.
    """
    ssm_state_indices, num_accepted_tokens = kwargs.get("ssm_state_indices"), kwargs.get("num_accepted_tokens")
    inplace_final_state, out = kwargs.get("inplace_final_state", False), kwargs.get("out")
    cu_seqlens_cpu, check_indices = kwargs.get("cu_seqlens_cpu"), kwargs.get("check_indices", True)
    key = None
    if FAST_PATH:
        key = _signature(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, lower_bound, cu_seqlens,
                         ssm_state_indices, num_accepted_tokens, out, cu_seqlens_cpu, kwargs,
                         (output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                          use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, inplace_final_state,
                          check_indices))
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        p = validate_fused_recurrent_kda(
            q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, state_v_first, cu_seqlens,
            ssm_state_indices, num_accepted_tokens, inplace_final_state, cu_seqlens_cpu, out, check_indices, kwargs,
        )
    else:  # a signature validated before: only the checks of tensor contents remain
        check_recurrent_contents(q.device, plan.T, plan.N, cu_seqlens, cu_seqlens_cpu, ssm_state_indices,
                                 num_accepted_tokens, initial_state, inplace_final_state, check_indices, False)
    q, k, v, g, beta = q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.contiguous()
    if cu_seqlens is not None:  # the kernels read these 1-D tables as contiguous
        cu_seqlens = cu_seqlens.contiguous()
    if num_accepted_tokens is not None:
        num_accepted_tokens = num_accepted_tokens.contiguous()
    h0 = initial_state
    if h0 is not None and not (inplace_final_state or ssm_state_indices is not None):
        h0 = h0.contiguous()
    A_log, dt_bias = (A_log, dt_bias) if use_gate_in_kernel else (None, None)
    flat_A_log = A_log.contiguous() if A_log is not None else None
    flat_dt_bias = dt_bias.contiguous() if dt_bias is not None else None
    if plan is None:
        p = p._replace(A_log=flat_A_log, dt_bias=flat_dt_bias)
        gate = gate_mode(use_gate_in_kernel, lower_bound)
        flags = dict(use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, gate=gate,
                     lower_bound=float(lower_bound) if gate == 2 else 0.0,
                     use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval)
        if p.requires_grad:
            return FusedRecurrentKDAFunction.apply(q, k, v, g, beta, A_log, dt_bias, h0, ssm_state_indices,
                                                   num_accepted_tokens, cu_seqlens, p, flags, output_final_state)
        plan = _FwdPlan(q, h0, ssm_state_indices, num_accepted_tokens, cu_seqlens, p, flags,
                        inplace=inplace_final_state, output_final_state=output_final_state, keep=key is not None)
        if key is not None:
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
    o, ht = _launch_fwd(plan, q, k, v, g, beta, flat_A_log, flat_dt_bias, h0, ssm_state_indices,
                        num_accepted_tokens, cu_seqlens, out)
    return o, (initial_state if inplace_final_state else ht)
