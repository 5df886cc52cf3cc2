"""Input validation for ``chunk_kda``: every check runs on the host, before any kernel launch.

``validate_chunk_kda`` takes the arguments of the public ``chunk_kda`` (its ``**kwargs`` as a dict), raises a
``TypeError``/``ValueError`` (``NotImplementedError`` for features this project does not have) whose message names
the argument, what it got and what was expected, and returns a ``KDAProblem`` with the resolved sizes and options.

Order: the call's form first (unknown keywords, flag types, the deprecated keyword, unsupported features, tensor
types and ranks: without them no shape can be read), then the checks fla 0.6.0 performs, in fla's order and with
fla's message text (so a caller sees the same first error), then this project's own checks (dtypes, devices,
cu_seqlens contents, scale, ...). Nothing here depends on memory layout: non-contiguous inputs are fine.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, NamedTuple

import torch

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INDEX_DTYPES = (torch.int32, torch.int64)
_EXTRA_KWARGS = ("A_log", "dt_bias", "chunk_size", "transpose_state_layout")
_CHUNK_SIZES = (32, 64)
_MAX_K = 256
_SAFE_LOWER_BOUND = -5.0
_PREVIEW = 8


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
        ``None`` without ``cu_seqlens``.
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


def _describe(t: torch.Tensor) -> str:
    return f"shape {list(t.shape)}, dtype {t.dtype}, device {t.device}"


def _preview(values: torch.Tensor) -> str:
    items = values[:_PREVIEW].tolist()
    return str(items) if values.numel() <= _PREVIEW else f"{str(items)[:-1]}, ...] ({values.numel()} values)"


def _require_tensor(name: str, value: Any, ndim: int, dims: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of shape {dims}, got {type(value).__name__}.")
    if value.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D with shape {dims}, got {value.ndim}-D ({_describe(value)}).")


def _require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {type(value).__name__} ({value!r}).")


def _real_number(name: str, value: Any, allow_tensor: bool) -> float:
    """Python float of a real number (or of a 0-d real tensor when ``allow_tensor``); TypeError/ValueError else."""
    if allow_tensor and isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise ValueError(f"`{name}` must be a real number or a 0-d tensor, got a tensor of {_describe(value)}.")
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"`{name}` must be a real number, got a 0-d tensor of dtype {value.dtype}.")
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        expected = "a real number or a 0-d tensor" if allow_tensor else "a real number"
        raise TypeError(f"`{name}` must be {expected}, got {type(value).__name__} ({value!r}).")
    return float(value)


def _fold_transpose_state_layout(kwargs: dict, state_v_first: bool) -> bool:
    if "transpose_state_layout" not in kwargs:
        return state_v_first
    if state_v_first:
        raise ValueError("Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
    warnings.warn(
        "`transpose_state_layout` is deprecated and renamed to `state_v_first`.", DeprecationWarning, stacklevel=4
    )
    return kwargs["transpose_state_layout"]


def _check_call_form(q, k, v, g, beta, initial_state, cu_seqlens, flags: dict, kwargs: dict) -> None:
    """Keyword names, flag types and tensor ranks: what must hold before any shape can be read."""
    unknown = sorted(set(kwargs) - set(_EXTRA_KWARGS))
    if unknown:
        raise TypeError(
            f"chunk_kda() got unexpected keyword argument(s) {unknown}; the accepted extra keywords are "
            f"{list(_EXTRA_KWARGS)}."
        )
    for name, value in flags.items():
        _require_bool(name, value)
    if "transpose_state_layout" in kwargs:
        _require_bool("transpose_state_layout", kwargs["transpose_state_layout"])
    for name, t, dims in (("q", q, "[B, T, H, K]"), ("k", k, "[B, T, H, K]"), ("v", v, "[B, T, HV, V]"),
                          ("g", g, "[B, T, HV, K]")):
        _require_tensor(name, t, 4, dims)
    _require_tensor("beta", beta, 3, "[B, T, HV]")
    for name, t, dims in (("q", q, "batch B, tokens T, head count H, head dim K"),
                          ("v", v, "batch B, tokens T, head count HV, head dim V")):
        if 0 in t.shape:
            raise ValueError(f"`{name}` must have no empty dimension ({dims} all >= 1), got {_describe(t)}.")
    if initial_state is not None:
        _require_tensor("initial_state", initial_state, 4, "[N, HV, K, V] ([N, HV, V, K] with state_v_first)")
    if cu_seqlens is not None:
        _require_index_tensor("cu_seqlens", cu_seqlens)


def _require_index_tensor(name: str, t: Any) -> None:
    _require_tensor(name, t, 1, "[N + 1]")
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"`{name}` must have an integer dtype (torch.int32 or torch.int64), got {t.dtype}.")
    if t.shape[0] < 2:
        raise ValueError(f"`{name}` must hold at least 2 boundaries [0, ..., T] (N + 1 for N >= 1 sequences), "
                         f"got {t.shape[0]}.")


def _check_fla_order(q, k, v, g, beta, initial_state, cu_seqlens, n_states, use_gate_in_kernel,
                     use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, kwargs: dict) -> None:
    """The checks fla 0.6.0 performs, in its order and with its message text (asserts become ValueError/TypeError).
    n_states: the number of initial states a varlen call takes (the global sequences under context parallel)."""
    if cu_seqlens is not None:
        if q.shape[0] != 1:
            raise ValueError(
                f"The batch size is expected to be 1 rather than {q.shape[0]} when using `cu_seqlens`."
                f"Please flatten variable-length inputs before processing. (q: {_describe(q)})"
            )
        if initial_state is not None and initial_state.shape[0] != n_states:
            raise ValueError(
                f"The number of initial states is expected to be equal to the number of input sequences, "
                f"i.e., {n_states} rather than {initial_state.shape[0]}. "
                f"(`initial_state`: {_describe(initial_state)}; the batch has {n_states} sequences)"
            )
    if initial_state is not None and initial_state.dtype != torch.float32:
        raise TypeError(f"initial_state must be in float32, got {initial_state.dtype} ({_describe(initial_state)}).")
    if use_gate_in_kernel and kwargs.get("A_log") is None and lower_bound is None:
        raise ValueError("`A_log` must be provided when `use_gate_in_kernel=True` and `lower_bound` is not set.")
    chunk_size = kwargs.get("chunk_size", 64)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size not in _CHUNK_SIZES:
        raise ValueError(f"`chunk_size` must be either 32 or 64 for KDA, got {chunk_size}.")
    if safe_gate and use_gate_in_kernel:
        if lower_bound is None:
            raise ValueError("`lower_bound` must be specified when `safe_gate=True` and `use_gate_in_kernel=True`.")
        if not (_SAFE_LOWER_BOUND <= _real_number("lower_bound", lower_bound, allow_tensor=False) < 0):
            raise ValueError(f"`lower_bound` must be in the safe range [-5, 0), got {lower_bound}.")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    B, T, H, K = q.shape
    HV = v.shape[2]
    if k.shape != q.shape:
        raise ValueError(f"q and k must have the same shape, got q={list(q.shape)} vs k={list(k.shape)}")
    if K > _MAX_K:
        raise ValueError(f"Currently we only support key headdim <=256 for KDA, got {K} "
                         f"(head dim K of `q`/`k`, q shape {list(q.shape)}).")
    if HV % H != 0:
        raise ValueError(
            f"For GVA, num_v_heads (HV={HV}) must be evenly divisible by num_qk_heads (H={H}), "
            f"but got HV % H = {HV % H} (v head count HV from v shape {list(v.shape)}, "
            f"q/k head count H from q shape {list(q.shape)})"
        )
    if g.shape != (B, T, HV, K):
        raise ValueError(f"g must have shape [B, T, HV, K]={[B, T, HV, K]}, got {list(g.shape)}")
    if beta.shape != (B, T, HV):
        raise ValueError(f"beta must have shape [B, T, HV]={[B, T, HV]}, got {list(beta.shape)}")


def check_group(group, name: str) -> tuple[int, int]:
    """(rank, world size) of this process in `group`, a torch.distributed ProcessGroup it belongs to; `name` is the
    argument's name in the messages."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"`{name}` needs an initialized torch.distributed process group (dist.init_process_group), "
                         f"but torch.distributed is not initialized in this process.")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"`{name}` must be a torch.distributed ProcessGroup this process belongs to (e.g. "
                        f"dist.group.WORLD or one from dist.new_group), got {type(group).__name__} ({group!r}).")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError(f"`{name}` is a process group ({world_size} ranks) that this process (global rank "
                         f"{dist.get_rank()}) is not a member of: use the group of this rank.")
    return rank, world_size


_CP_FIELDS = ("group", "cu_seqlens", "cu_seqlens_cpu", "layout")
_CP_LAYOUT_FIELDS = {"contiguous": ("pre_num_ranks", "post_num_ranks"),
                     "zigzag": ("part_len", "front_num_seqs", "pre_num_ranks_by_part", "post_num_ranks_by_part")}


def _check_cp_context(cp_context, q, initial_state, output_final_state: bool, cu_seqlens, cu_seqlens_cpu):
    """A context from `triton_kda.build_cp_context` or fla's `build_cp_context`, usable by this process for q.
    Returns (cu_seqlens, cu_seqlens_cpu, n_states): the context's local boundaries, which replace the caller's, and
    the number of initial states the call takes (the global sequences; None for an fla context)."""
    source = "a context from triton_kda.build_cp_context (or fla.ops.cp.build_cp_context)"
    layout = getattr(cp_context, "layout", None)
    missing = [f for f in _CP_FIELDS + _CP_LAYOUT_FIELDS.get(layout, ()) if not hasattr(cp_context, f)]
    if missing:
        raise TypeError(f"`cp_context` must be {source}, got {type(cp_context).__name__} without the field(s) "
                        f"{missing}.")
    if layout not in _CP_LAYOUT_FIELDS:
        raise ValueError(f"`cp_context.layout` must be 'contiguous' or 'zigzag', got {layout!r}.")
    rank, world_size = check_group(cp_context.group, "cp_context.group")
    built = (getattr(cp_context, "rank", None), getattr(cp_context, "world_size", None))
    if built != (None, None) and built != (rank, world_size):
        raise ValueError(f"`cp_context` was built for rank {built[0]} of a {built[1]}-rank group, but this process is "
                         f"rank {rank} of the {world_size}-rank `cp_context.group`: a context from another group or "
                         f"rank; build it on this rank with its own group.")
    local, local_cpu = cp_context.cu_seqlens, cp_context.cu_seqlens_cpu
    _require_index_tensor("cp_context.cu_seqlens", local)
    if local.device != q.device:
        raise ValueError(f"`cp_context.cu_seqlens` must be on q's device {q.device}, got device {local.device}.")
    if cu_seqlens is not None and cu_seqlens is not local and cu_seqlens.shape != local.shape:
        raise ValueError(f"under context parallel `cu_seqlens` must be None or the context's local boundaries "
                         f"`cp_context.cu_seqlens` ({local.shape[0]} boundaries), which replace it; got "
                         f"{cu_seqlens.shape[0]} boundaries (the global cu_seqlens goes to build_cp_context).")
    if cu_seqlens_cpu is not None and local_cpu is None:
        local_cpu = cu_seqlens_cpu
    if local_cpu is not None:
        _require_index_tensor("cp_context.cu_seqlens_cpu", local_cpu)
        T_local = int(local_cpu[-1])
        if q.shape[1] != T_local:
            raise ValueError(f"`q` must hold this rank's slice of the global batch, {T_local} tokens (`cp_context`: "
                             f"rank {rank} of {world_size}, layout {layout!r}), got T={q.shape[1]} ({_describe(q)}).")
    n_states = getattr(cp_context, "num_seqs_global", None)
    if (initial_state is not None or output_final_state) and n_states is None:
        raise ValueError("`initial_state` and `output_final_state=True` under context parallel need a context from "
                         "triton_kda.build_cp_context (it knows the global sequences); this cp_context "
                         f"({type(cp_context).__name__}) does not.")
    return local, local_cpu, n_states


def _check_dtypes_and_devices(q, k, v, g, beta, initial_state, cu_seqlens) -> None:
    if q.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"`q` must be bfloat16, float16 or float32, got {q.dtype}.")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"`{name}` must have q's dtype {q.dtype}, got {t.dtype}.")
    if g.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"`g` must be bfloat16, float16 or float32, got {g.dtype}.")
    if beta.dtype not in (torch.float32, q.dtype):
        raise TypeError(f"`beta` must be float32 or q's dtype {q.dtype}, got {beta.dtype}.")
    for name, t in (("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state),
                    ("cu_seqlens", cu_seqlens)):
        if t is not None and t.device != q.device:
            raise ValueError(f"`{name}` must be on q's device {q.device}, got device {t.device}.")


def _check_initial_state(initial_state: torch.Tensor, N: int, HV: int, K: int, V: int, state_v_first: bool) -> None:
    if state_v_first:
        expected, dims = (N, HV, V, K), "[N, HV, V, K] (state_v_first=True)"
    else:
        expected, dims = (N, HV, K, V), "[N, HV, K, V]"
    if initial_state.shape != expected:
        raise ValueError(f"`initial_state` must have shape {dims}={list(expected)}, got {list(initial_state.shape)}.")


def _check_gate_params(A_log, dt_bias, HV: int, K: int, device: torch.device) -> None:
    for name, t, numel, what in (("A_log", A_log, HV, "HV"), ("dt_bias", dt_bias, HV * K, "HV * K")):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"`{name}` must be a torch.Tensor with {what}={numel} elements, got {type(t).__name__}.")
        if t.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"`{name}` must be bfloat16, float16 or float32, got {t.dtype}.")
        if t.numel() != numel:
            raise ValueError(f"`{name}` must have {what}={numel} elements, got {t.numel()} ({_describe(t)}).")
        if t.device != device:
            raise ValueError(f"`{name}` must be on q's device {device}, got device {t.device}.")


def _check_lower_bound(lower_bound) -> None:
    value = _real_number("lower_bound", lower_bound, allow_tensor=False)
    if not (math.isfinite(value) and value < 0):
        raise ValueError(f"`lower_bound` must be a finite negative number (log-space gate floor), got {lower_bound}.")


def _seqlens_on_cpu(cu_seqlens: torch.Tensor, cu_seqlens_cpu, T: int) -> torch.Tensor:
    """int64 CPU copy of the boundaries, checked: starts at 0, non-decreasing, ends at T."""
    if cu_seqlens_cpu is None:
        name, source = "cu_seqlens", cu_seqlens
    else:
        name, source = "cu_seqlens_cpu", cu_seqlens_cpu
        _require_index_tensor(name, source)
        if source.device.type != "cpu":
            raise ValueError(f"`cu_seqlens_cpu` must be a CPU tensor, got device {source.device}.")
        if source.shape != cu_seqlens.shape:
            raise ValueError(f"`cu_seqlens_cpu` must have the length of `cu_seqlens` ({cu_seqlens.shape[0]}), "
                             f"got {source.shape[0]}.")
    seqlens = source.to(device="cpu", dtype=torch.int64, copy=True)
    if seqlens[0] != 0:
        raise ValueError(f"`{name}` must start at 0, got {_preview(seqlens)}.")
    drops = (seqlens[1:] < seqlens[:-1]).nonzero()
    if drops.numel() > 0:
        i = int(drops[0, 0])
        raise ValueError(f"`{name}` must be non-decreasing, got {name}[{i + 1}]={int(seqlens[i + 1])} < "
                         f"{name}[{i}]={int(seqlens[i])} in {_preview(seqlens)}.")
    if seqlens[-1] != T:
        raise ValueError(f"`{name}` must end at T={T} (the token count of q), got {int(seqlens[-1])} "
                         f"in {_preview(seqlens)}.")
    return seqlens


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
    deprecated ``transpose_state_layout``. Copies cu_seqlens to the CPU once unless cu_seqlens_cpu is given.
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
    n_states = len(cu_seqlens) - 1 if cu_seqlens is not None else q.shape[0]
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
    else:
        seqlens_cpu = _seqlens_on_cpu(cu_seqlens, cu_seqlens_cpu, T)
    if scale is None:
        scale_value = K ** -0.5
    else:
        scale_value = _real_number("scale", scale, allow_tensor=True)
        if not math.isfinite(scale_value) or scale_value == 0.0:
            raise ValueError(f"`scale` must be finite and non-zero, got {scale_value}.")
    return KDAProblem(B=B, T=T, H=H, HV=HV, K=K, V=V, N=N, chunk_size=kwargs.get("chunk_size", 64),
                      scale=scale_value, A_log=A_log, dt_bias=dt_bias, state_v_first=state_v_first,
                      seqlens_cpu=seqlens_cpu)
