"""Input validation for ``fused_recurrent_kda`` and for state pools: every check runs on the host, before any launch.

``validate_fused_recurrent_kda`` checks the arguments of the public ``fused_recurrent_kda`` in the order of
`validate_chunk_kda` (with the shared checks of `_checks.py`), then its serving keywords (``ssm_state_indices``,
``num_accepted_tokens``, ``inplace_final_state``, ``out``), and returns a ``RecurrentProblem``; ``check_pool``,
``check_state_indices`` and ``check_slot_contents`` check a state pool, the slots a call names and their contents,
and ``validate_state_pool`` checks ``chunk_kda``'s pool keywords (prefill into a state pool). Messages name the
argument, what it got and what was expected.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from triton_kda._checks import (
    _INDEX_DTYPES,
    _check_call_form,
    _check_dtypes_and_devices,
    _check_fla_order,
    _check_gate_params,
    _check_initial_state,
    _check_lower_bound,
    _describe,
    _fold_transpose_state_layout,
    _real_number,
    _require_bool,
    _require_tensor,
    seqlens_on_cpu,
)
from triton_kda._validate import KDAProblem
from triton_kda.configs import capturing

_RECURRENT_EXTRA_KWARGS = ("ssm_state_indices", "num_accepted_tokens", "inplace_final_state", "cu_seqlens_cpu", "out",
                           "check_indices", "transpose_state_layout")


class RecurrentProblem(NamedTuple):
    """The resolved sizes and options of one ``fused_recurrent_kda`` call.

    B, T, H, HV, K, V, N, scale, A_log, dt_bias, state_v_first: as in `KDAProblem`.
    num_slots: ``initial_state.shape[0]`` (the pool's slot count with ``ssm_state_indices``, else N); 0 without
        an initial state.
    seqlens_cpu: int64 CPU copy of checked sequence boundaries ``[N + 1]``, or None (fixed length, or varlen whose
        boundaries were left unchecked: ``check_indices=False`` or CUDA-graph capture, without ``cu_seqlens_cpu``).
    requires_grad: grad mode is on and an input requires grad (the call goes through autograd).
    """

    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int
    scale: float
    A_log: torch.Tensor | None
    dt_bias: torch.Tensor | None
    state_v_first: bool
    num_slots: int
    seqlens_cpu: torch.Tensor | None
    requires_grad: bool


def _state_dims(state_v_first: bool, lead: str = "N") -> str:
    return f"[{lead}, HV, V, K] (state_v_first=True)" if state_v_first else f"[{lead}, HV, K, V]"


def check_pool(pool: torch.Tensor, HV: int, K: int, V: int, state_v_first: bool, device: torch.device) -> None:
    """A state pool: fp32 ``[num_slots, HV, K, V]`` (``[num_slots, HV, V, K]`` with state_v_first) on `device`,
    its last three dims contiguous (it is read and written in place at any slot stride)."""
    inner = (HV, V, K) if state_v_first else (HV, K, V)
    dims = _state_dims(state_v_first, "num_slots")
    if pool.dtype != torch.float32:
        raise TypeError(f"`initial_state` (the state pool) must be float32, got {pool.dtype} ({_describe(pool)}).")
    if tuple(pool.shape[1:]) != inner or pool.shape[0] < 1:
        raise ValueError(f"`initial_state` (the state pool) must have shape {dims} with HV={HV}, K={K}, V={V} and "
                         f"num_slots >= 1, got {list(pool.shape)}.")
    if pool.stride()[1:] != (inner[1] * inner[2], inner[2], 1):
        raise ValueError(f"`initial_state` (the state pool, updated in place) must be contiguous in its last three "
                         f"dims (any slot stride), got strides {list(pool.stride())} for shape {list(pool.shape)}.")
    if pool.device != device:
        raise ValueError(f"`initial_state` must be on q's device {device}, got device {pool.device}.")


def check_state_indices(indices: Any, N: int, device: torch.device, allow_per_token: bool) -> None:
    """``ssm_state_indices``: int32/int64 ``[N]`` (or ``[N, S]`` per token when `allow_per_token`) on `device`."""
    dims = "[N] or [N, S]" if allow_per_token else "[N]"
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"`ssm_state_indices` must be a torch.Tensor of shape {dims}, got {type(indices).__name__}.")
    if indices.dtype not in _INDEX_DTYPES:
        raise TypeError(f"`ssm_state_indices` must be int32 or int64, got {indices.dtype}.")
    if indices.ndim not in ((1, 2) if allow_per_token else (1,)):
        raise ValueError(f"`ssm_state_indices` must have shape {dims}, got {indices.ndim}-D ({_describe(indices)}).")
    if indices.shape[0] != N or (indices.ndim == 2 and indices.shape[1] < 1):
        raise ValueError(f"`ssm_state_indices` must have shape {dims} with one row per sequence (N={N}) and S >= 1, "
                         f"got {list(indices.shape)}.")
    if indices.device != device:
        raise ValueError(f"`ssm_state_indices` must be on q's device {device}, got device {indices.device}.")


def check_slot_contents(indices: torch.Tensor, num_accepted: torch.Tensor | None, lengths: torch.Tensor | None,
                        num_slots: int, per_token_writes: bool) -> None:
    """Host check of the slots a call reads and writes (copies the indices to the host when they are elsewhere).

    indices ``[N]`` (sequence n reads and writes slot indices[n]) or ``[N, S]`` (sequence n reads slot
    ``indices[n, num_accepted[n] - 1]``, column 0 without num_accepted, and with `per_token_writes` writes the state
    after its token t to slot ``indices[n, t]``, so it needs S >= its length). lengths: ``[N]`` int64 tokens per
    sequence (needed with `per_token_writes`). A sequence whose read entry is negative is padding and uses no slot;
    a negative write entry skips that token's write. Every used entry must be below `num_slots`, and no slot may be
    used by two sequences (their programs run concurrently)."""
    idx = indices.to("cpu", torch.int64)
    N = idx.shape[0]
    if idx.ndim == 1:
        used, mask = idx[:, None], (idx >= 0)[:, None]
    else:
        S = idx.shape[1]
        col = torch.zeros(N, dtype=torch.int64)
        if num_accepted is not None:
            acc = num_accepted.to("cpu", torch.int64)
            bad = ((acc < 1) | (acc > S)).nonzero()
            if bad.numel():
                n = int(bad[0, 0])
                raise ValueError(f"`num_accepted_tokens` must be in [1, S={S}] (sequence n starts from slot "
                                 f"ssm_state_indices[n, num_accepted_tokens[n] - 1]), got num_accepted_tokens[{n}]="
                                 f"{int(acc[n])}.")
            col = acc - 1
        cols = torch.arange(S)
        mask = cols[None, :] == col[:, None]
        if per_token_writes:
            long = (lengths > S).nonzero()
            if long.numel():
                n = int(long[0, 0])
                raise ValueError(f"sequence {n} has {int(lengths[n])} tokens but `ssm_state_indices` has S={S} "
                                 f"columns; with inplace_final_state the state after token t is written to slot "
                                 f"ssm_state_indices[n, t], so S must be at least the longest sequence.")
            mask = mask | (cols[None, :] < lengths[:, None])
        read = idx.gather(1, col[:, None])
        used, mask = idx, mask & (read >= 0) & (idx >= 0)
    over = (mask & (used >= num_slots)).nonzero()
    if over.numel():
        at = tuple(int(i) for i in over[0]) if idx.ndim == 2 else (int(over[0, 0]),)
        raise ValueError(f"`ssm_state_indices`{list(at)} = {int(idx[at])} is out of range for a pool of {num_slots} "
                         f"slots: entries must be in [0, {num_slots}) (negative entries mark padding).")
    seq = torch.arange(N)[:, None].expand_as(used)[mask]
    pairs = torch.unique(torch.stack([used[mask], seq]), dim=1)
    slots, counts = torch.unique(pairs[0], return_counts=True)
    if (counts > 1).any():
        slot = int(slots[counts > 1][0])
        owners = pairs[1][pairs[0] == slot].tolist()
        raise ValueError(f"`ssm_state_indices` gives slot {slot} to sequences {owners}; live entries must be "
                         f"distinct (a slot belongs to one sequence per call).")


def validate_fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log,
    dt_bias,
    scale,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool,
    allow_neg_eigval: bool,
    lower_bound: float | None,
    state_v_first: bool,
    cu_seqlens: torch.Tensor | None,
    ssm_state_indices: torch.Tensor | None,
    num_accepted_tokens: torch.Tensor | None,
    inplace_final_state: bool,
    cu_seqlens_cpu: torch.Tensor | None,
    out: torch.Tensor | None,
    check_indices: bool,
    kwargs: dict,
) -> RecurrentProblem:
    """Check every argument of ``fused_recurrent_kda`` and resolve its sizes (``kwargs`` is its ``**kwargs``, whose
    serving keywords the caller also passes by name) (same order as `validate_chunk_kda`:
    call form, fla's checks, then dtypes, devices, states, gate parameters, scale; then the serving keywords).

    With ``ssm_state_indices`` the initial_state is a pool ``[num_slots, HV, K, V]`` (see `check_pool`), else
    ``[N, HV, K, V]``. The contents of ssm_state_indices, num_accepted_tokens and cu_seqlens are checked on the host
    (`check_slot_contents`, `seqlens_on_cpu`) when ``check_indices`` is True and no CUDA graph is being captured;
    cu_seqlens also whenever that costs no device sync (cu_seqlens_cpu given) or a backward may follow.
    """
    flags = {
        "output_final_state": output_final_state, "use_qk_l2norm_in_kernel": use_qk_l2norm_in_kernel,
        "use_gate_in_kernel": use_gate_in_kernel, "use_beta_sigmoid_in_kernel": use_beta_sigmoid_in_kernel,
        "allow_neg_eigval": allow_neg_eigval, "state_v_first": state_v_first,
        "inplace_final_state": inplace_final_state, "check_indices": check_indices,
    }
    _check_call_form(q, k, v, g, beta, initial_state, cu_seqlens, flags, kwargs, fn="fused_recurrent_kda",
                     extra=_RECURRENT_EXTRA_KWARGS)
    state_v_first = _fold_transpose_state_layout(kwargs, state_v_first)
    pool = ssm_state_indices is not None
    n_states = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else q.shape[0]
    _check_fla_order(q, k, v, g, beta, None if pool else initial_state, cu_seqlens, n_states, use_gate_in_kernel,
                     use_beta_sigmoid_in_kernel, allow_neg_eigval, False, lower_bound, {"A_log": A_log})
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if v.shape[:2] != q.shape[:2]:
        raise ValueError(f"`v` must have shape [B, T, HV, V] with q's B={B} and T={T}, got {list(v.shape)}.")
    _check_dtypes_and_devices(q, k, v, g, beta, initial_state, cu_seqlens)
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    if initial_state is not None:
        if not pool:
            _check_initial_state(initial_state, N, HV, K, V, state_v_first)
        if pool or inplace_final_state:
            check_pool(initial_state, HV, K, V, state_v_first, q.device)
    if lower_bound is not None:
        _check_lower_bound(lower_bound)
    A_log, dt_bias = (A_log, dt_bias) if use_gate_in_kernel else (None, None)
    _check_gate_params(A_log, dt_bias, HV, K, q.device)
    if scale is None:
        scale_value = K ** -0.5
    else:
        scale_value = _real_number("scale", scale, allow_tensor=True)
        if not math.isfinite(scale_value) or scale_value == 0.0:
            raise ValueError(f"`scale` must be finite and non-zero, got {scale_value}.")

    if inplace_final_state and initial_state is None:
        raise ValueError("`inplace_final_state=True` writes the final states into `initial_state` (the state pool), "
                         "got initial_state=None.")
    if pool:
        if initial_state is None:
            raise ValueError("`ssm_state_indices` names slots of the state pool `initial_state` "
                             "[num_slots, HV, K, V], got initial_state=None.")
        check_state_indices(ssm_state_indices, N, q.device, allow_per_token=True)
    per_token = pool and ssm_state_indices.ndim == 2
    if num_accepted_tokens is not None:
        if not per_token:
            raise ValueError("`num_accepted_tokens` selects the column of per-token `ssm_state_indices` [N, S] each "
                             "sequence starts from; pass ssm_state_indices of shape [N, S].")
        if not isinstance(num_accepted_tokens, torch.Tensor):
            raise TypeError(f"`num_accepted_tokens` must be a torch.Tensor of shape [N], got "
                            f"{type(num_accepted_tokens).__name__}.")
        if num_accepted_tokens.dtype not in _INDEX_DTYPES:
            raise TypeError(f"`num_accepted_tokens` must be int32 or int64, got {num_accepted_tokens.dtype}.")
        if tuple(num_accepted_tokens.shape) != (N,):
            raise ValueError(f"`num_accepted_tokens` must have shape [N]=[{N}], got "
                             f"{list(num_accepted_tokens.shape)}.")
        if num_accepted_tokens.device != q.device:
            raise ValueError(f"`num_accepted_tokens` must be on q's device {q.device}, got device "
                             f"{num_accepted_tokens.device}.")
    if per_token and inplace_final_state and cu_seqlens is None and T > ssm_state_indices.shape[1]:
        raise ValueError(f"`ssm_state_indices` has S={ssm_state_indices.shape[1]} columns but each sequence has "
                         f"T={T} tokens; with inplace_final_state the state after token t is written to slot "
                         f"ssm_state_indices[n, t], so S must be at least T.")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"`out` must be a torch.Tensor of shape [B, T, HV, V], got {type(out).__name__}.")
        if out.shape != v.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
            raise ValueError(f"`out` must be a contiguous tensor of v's shape {list(v.shape)}, q's dtype {q.dtype} "
                             f"on q's device {q.device}, got {_describe(out)} (contiguous: {out.is_contiguous()}).")
    if cu_seqlens is None and cu_seqlens_cpu is not None:
        raise ValueError("`cu_seqlens_cpu` was given without `cu_seqlens`; pass both or neither.")

    inputs = (q, k, v, g, beta, A_log, dt_bias, initial_state)
    grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
    if grad and inplace_final_state:
        raise ValueError("`inplace_final_state=True` overwrites the initial states a backward pass needs; with inputs "
                         "that require grad pass inplace_final_state=False (the final states are then returned).")
    if grad and out is not None:
        raise ValueError("`out` cannot be combined with inputs that require grad; pass out=None.")

    seqlens_cpu = check_recurrent_contents(q.device, T, N, cu_seqlens, cu_seqlens_cpu, ssm_state_indices,
                                           num_accepted_tokens, initial_state, inplace_final_state, check_indices,
                                           grad)
    return RecurrentProblem(B=B, T=T, H=H, HV=HV, K=K, V=V, N=N, scale=scale_value, A_log=A_log, dt_bias=dt_bias,
                            state_v_first=state_v_first,
                            num_slots=initial_state.shape[0] if initial_state is not None else 0,
                            seqlens_cpu=seqlens_cpu, requires_grad=grad)


def check_recurrent_contents(device: torch.device, T: int, N: int, cu_seqlens, cu_seqlens_cpu, ssm_state_indices,
                             num_accepted_tokens, initial_state, inplace_final_state: bool, check_indices: bool,
                             grad: bool) -> torch.Tensor | None:
    """The checks of `validate_fused_recurrent_kda` that read tensor contents, for arguments whose form it already
    checked (q on `device` with T tokens per row, N sequences): cu_seqlens (`seqlens_on_cpu`) whenever
    ``check_indices`` holds outside CUDA-graph capture, a backward may follow (`grad`), cu_seqlens_cpu is given or
    the boundaries live on the CPU; the slots of ssm_state_indices / num_accepted_tokens (`check_slot_contents`)
    whenever ``check_indices`` holds outside capture. Returns the checked boundaries (`RecurrentProblem.seqlens_cpu`).
    """
    check = check_indices and not capturing(device)
    seqlens_cpu = None
    if cu_seqlens is not None and (check or grad or cu_seqlens_cpu is not None or cu_seqlens.device.type == "cpu"):
        seqlens_cpu = seqlens_on_cpu(cu_seqlens, cu_seqlens_cpu, T)
    if ssm_state_indices is not None and check:
        lengths = seqlens_cpu[1:] - seqlens_cpu[:-1] if seqlens_cpu is not None else torch.full((N,), T)
        check_slot_contents(ssm_state_indices, num_accepted_tokens, lengths, initial_state.shape[0],
                            ssm_state_indices.ndim == 2 and inplace_final_state)
    return seqlens_cpu


def validate_state_pool(pool, ssm_state_indices, inplace_final_state, p: KDAProblem, device: torch.device) -> None:
    """The pool keywords of ``chunk_kda`` (prefill into a state pool), after `validate_chunk_kda` resolved `p`:
    pool as in `check_pool`; ssm_state_indices ``[N]`` (without it the pool holds one slot per sequence, in order);
    contents checked on the host unless a CUDA graph is being captured. The pool takes no gradient."""
    _require_bool("inplace_final_state", inplace_final_state)
    if pool is None:
        raise ValueError("`ssm_state_indices` / `inplace_final_state=True` need the state pool as `initial_state` "
                         "[num_slots, HV, K, V], got initial_state=None.")
    _require_tensor("initial_state", pool, 4, _state_dims(p.state_v_first, "num_slots"))
    check_pool(pool, p.HV, p.K, p.V, p.state_v_first, device)
    if pool.requires_grad and torch.is_grad_enabled():
        raise ValueError("the state pool `initial_state` takes no gradient in chunk_kda (its slots are read and "
                         "written by index); pass a pool that does not require grad.")
    if ssm_state_indices is None:
        if pool.shape[0] != p.N:
            raise ValueError(f"without `ssm_state_indices` the pool `initial_state` holds one slot per sequence: "
                             f"expected {p.N} slots, got {pool.shape[0]}.")
        return
    check_state_indices(ssm_state_indices, p.N, device, allow_per_token=False)
    if not capturing(ssm_state_indices.device):
        check_slot_contents(ssm_state_indices, None, None, pool.shape[0], False)
