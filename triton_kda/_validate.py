"""Input validation for ``chunk_kda``: every check runs on the host, before any kernel launch.

``validate_chunk_kda`` takes the arguments of the public ``chunk_kda`` (its ``**kwargs`` as a dict), raises a
``TypeError``/``ValueError`` (``NotImplementedError`` for features this project does not have) whose message names
the argument, what it got and what was expected, and returns a ``KDAProblem`` with the resolved sizes and options.

Order: the call's form first (unknown keywords, flag types, the deprecated keyword, unsupported features, tensor
types and ranks: without them no shape can be read), then the checks fla 0.6.0 performs, in fla's order and with
fla's message text (so a caller sees the same first error), then this project's own checks (dtypes, devices,
cu_seqlens contents, scale, ...). Nothing here depends on memory layout: non-contiguous inputs are fine. The checks
it shares with ``fused_recurrent_kda`` are in `_checks.py`, those of ``cp_context`` in `_validate_cp.py`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import is_fake

from triton_kda._checks import (
    _check_call_form,
    _check_dtypes_and_devices,
    _check_fla_order,
    _check_gate_params,
    _check_initial_state,
    _check_lower_bound,
    _check_seqlens_cpu,
    _fold_transpose_state_layout,
    _real_number,
    seqlens_on_cpu,
)
from triton_kda._validate_cp import _check_cp_context


class KDAProblem(NamedTuple):
    """The resolved sizes and options of one ``chunk_kda`` call.

    B, T, H, HV, K, V: batch, tokens, q/k head count, v head count, key head dim, value head dim.
    N: number of sequences (``B``, or ``len(cu_seqlens) - 1`` in varlen mode where ``B == 1``; this rank's local
        sequences under context parallel).
    chunk_size: ``BT``, 32 or 64.
    scale: the query scale as a Python float (``K ** -0.5`` when ``None`` was given).
    A_log: the ``A_log`` kwarg (``HV`` float elements) when ``use_gate_in_kernel``, else ``None``.
    dt_bias: the ``dt_bias`` kwarg (``HV * K`` float elements) when ``use_gate_in_kernel``, else ``None``.
    state_v_first: states are ``[N, HV, V, K]`` when True, ``[N, HV, K, V]`` when False (deprecated
        ``transpose_state_layout`` already folded in).
    seqlens_cpu: int64 CPU copy of the sequence boundaries ``[N + 1]`` (taken from ``cu_seqlens_cpu`` when given),
        ``None`` without ``cu_seqlens``, and while tracing (torch.compile, fake tensors), where the values cannot
        be read: the op (`triton_kda.ops`) then checks them when it runs, with the same errors, before any launch.
    """

    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int
    chunk_size: int
    scale: float
    A_log: torch.Tensor | None
    dt_bias: torch.Tensor | None
    state_v_first: bool
    seqlens_cpu: torch.Tensor | None


def _traced(t: torch.Tensor) -> bool:
    """Whether t's values cannot be read here: dynamo is tracing (torch.compile) or t is a fake tensor."""
    return torch.compiler.is_compiling() or is_fake(t)


def validate_chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool,
    allow_neg_eigval: bool,
    safe_gate: bool,
    lower_bound: float | None,
    disable_recompute: bool,
    return_intermediate_states: bool,
    state_v_first: bool,
    cu_seqlens: torch.Tensor | None,
    cu_seqlens_cpu: torch.Tensor | None,
    cp_context,
    use_graph: bool,
    max_num_seqs: int | None,
    kwargs: dict,
) -> KDAProblem:
    """Check every argument of ``chunk_kda`` and resolve its sizes; ``kwargs`` is its ``**kwargs`` (not modified).

    Expects q, k ``[B, T, H, K]`` and v ``[B, T, HV, V]`` (bf16/fp16/fp32, one dtype), g ``[B, T, HV, K]`` (any of
    the three float dtypes), beta ``[B, T, HV]`` (fp32 or q's dtype), initial_state fp32 ``[N, HV, K, V]``
    (``[N, HV, V, K]`` with state_v_first), cu_seqlens int32/int64 ``[N + 1]`` (then B == 1), all on q's device;
    kwargs ``A_log`` (HV elements), ``dt_bias`` (HV * K elements), ``chunk_size`` (32 or 64, default 64) and the
    deprecated ``transpose_state_layout``. Copies cu_seqlens to the CPU once unless cu_seqlens_cpu is given (not
    while tracing: see ``KDAProblem.seqlens_cpu``).
    With ``cp_context`` (see ``_check_cp_context``) the context's local boundaries replace cu_seqlens and
    cu_seqlens_cpu, and initial_state has one row per global sequence. Raises TypeError/ValueError for bad input,
    NotImplementedError for use_graph.
    """
    flags = {
        "output_final_state": output_final_state, "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
        "use_gate_in_kernel": use_gate_in_kernel, "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel,
        "allow_neg_eigval": allow_neg_eigval, "safe_gate": safe_gate, "disable_recompute": disable_recompute,
        "return_intermediate_states": return_intermediate_states, "state_v_first": state_v_first,
        "use_graph": use_graph,
    }
    _check_call_form(q, k, v, g, beta, initial_state, cu_seqlens, flags, kwargs)
    state_v_first = _fold_transpose_state_layout(kwargs, state_v_first)
    n_states = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else q.shape[0]
    if cp_context is not None:
        cu_seqlens, cu_seqlens_cpu, n_states = _check_cp_context(cp_context, q, initial_state, output_final_state,
                                                                 cu_seqlens, cu_seqlens_cpu)
    if use_graph:
        raise NotImplementedError(
            "`use_graph=True` (a fixed-shape varlen chunk list for CUDA-graph capture, sized by `max_num_seqs`) "
            "is not implemented yet in triton-kda; pass use_graph=False."
        )
    if max_num_seqs is not None:
        raise ValueError(f"`max_num_seqs` is only meaningful with `use_graph=True`, got max_num_seqs={max_num_seqs} "
                         f"with use_graph=False; pass max_num_seqs=None.")

    _check_fla_order(q, k, v, g, beta, initial_state, cu_seqlens, n_states, use_gate_in_kernel,
                     use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, kwargs)

    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if v.shape[:2] != q.shape[:2]:
        raise ValueError(f"`v` must have shape [B, T, HV, V] with q's B={B} and T={T}, got {list(v.shape)}.")
    _check_dtypes_and_devices(q, k, v, g, beta, initial_state, cu_seqlens)
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    if initial_state is not None:
        _check_initial_state(initial_state, n_states, HV, K, V, state_v_first)
    if lower_bound is not None:
        _check_lower_bound(lower_bound)
    A_log, dt_bias = (kwargs.get("A_log"), kwargs.get("dt_bias")) if use_gate_in_kernel else (None, None)
    _check_gate_params(A_log, dt_bias, HV, K, q.device)
    if return_intermediate_states:
        if not torch.is_inference_mode_enabled():
            raise ValueError("`return_intermediate_states=True` is only allowed inside torch.inference_mode() "
                             "(it bypasses autograd), got it outside inference mode.")
        if disable_recompute:
            raise ValueError("`return_intermediate_states=True` requires `disable_recompute=False`, "
                             "got disable_recompute=True.")
    if cu_seqlens is None:
        if cu_seqlens_cpu is not None:
            raise ValueError("`cu_seqlens_cpu` was given without `cu_seqlens`; pass both or neither.")
        seqlens_cpu = None
    elif _traced(cu_seqlens) or (cu_seqlens_cpu is not None and _traced(cu_seqlens_cpu)):
        # the values cannot be read while tracing: the op checks them when it runs, before any launch
        _check_seqlens_cpu(cu_seqlens, cu_seqlens_cpu)
        seqlens_cpu = None
    else:
        seqlens_cpu = seqlens_on_cpu(cu_seqlens, cu_seqlens_cpu, T)
    if scale is None:
        scale_value = K ** -0.5
    else:
        scale_value = _real_number("scale", scale, allow_tensor=True)
        if not math.isfinite(scale_value) or scale_value == 0.0:
            raise ValueError(f"`scale` must be finite and non-zero, got {scale_value}.")
    return KDAProblem(B=B, T=T, H=H, HV=HV, K=K, V=V, N=N, chunk_size=kwargs.get("chunk_size", 64),
                      scale=scale_value, A_log=A_log, dt_bias=dt_bias, state_v_first=state_v_first,
                      seqlens_cpu=seqlens_cpu)
