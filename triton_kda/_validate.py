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
from torch._subclasses.fake_tensor import is_fake

from triton_kda.configs import capturing

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


def _check_call_form(q, k, v, g, beta, initial_state, cu_seqlens, flags: dict, kwargs: dict, fn: str = "chunk_kda",
                     extra: tuple[str, ...] = _EXTRA_KWARGS) -> None:
    """Keyword names, flag types and tensor ranks: what must hold before any shape can be read. ``fn`` names the
    public function in messages, ``extra`` the keywords its ``**kwargs`` accepts."""
    unknown = sorted(set(kwargs) - set(extra))
    if unknown:
        raise TypeError(
            f"{fn}() got unexpected keyword argument(s) {unknown}; the accepted extra keywords are {list(extra)}."
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


def _check_seqlens_cpu(cu_seqlens: torch.Tensor, cu_seqlens_cpu) -> None:
    """cu_seqlens_cpu's type, device and length (what can be checked without reading values)."""
    if cu_seqlens_cpu is None:
        return
    _require_index_tensor("cu_seqlens_cpu", cu_seqlens_cpu)
    if cu_seqlens_cpu.device.type != "cpu":
        raise ValueError(f"`cu_seqlens_cpu` must be a CPU tensor, got device {cu_seqlens_cpu.device}.")
    if cu_seqlens_cpu.shape != cu_seqlens.shape:
        raise ValueError(f"`cu_seqlens_cpu` must have the length of `cu_seqlens` ({cu_seqlens.shape[0]}), "
                         f"got {cu_seqlens_cpu.shape[0]}.")


def _traced(t: torch.Tensor) -> bool:
    """Whether t's values cannot be read here: dynamo is tracing (torch.compile) or t is a fake tensor."""
    return torch.compiler.is_compiling() or is_fake(t)


def seqlens_on_cpu(cu_seqlens: torch.Tensor, cu_seqlens_cpu, T: int) -> torch.Tensor:
    """int64 CPU copy of the boundaries (from cu_seqlens_cpu when given, else copied from cu_seqlens: a sync),
    checked: starts at 0, non-decreasing, ends at T."""
    _check_seqlens_cpu(cu_seqlens, cu_seqlens_cpu)
    name, source = ("cu_seqlens", cu_seqlens) if cu_seqlens_cpu is None else ("cu_seqlens_cpu", cu_seqlens_cpu)
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


# ---------------------------------------------------------------- fused_recurrent_kda and state pools

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
