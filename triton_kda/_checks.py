"""Input checks shared by the validation of the public functions, and the helpers of their messages.

The primitives (a tensor of a given rank, a bool, a real number, an index tensor, ``_describe`` and ``_preview`` for
messages) and the argument checks that ``chunk_kda`` (`_validate.py`) and ``fused_recurrent_kda``
(`_validate_recurrent.py`) run alike: the call's form, fla 0.6.0's checks in its order and with its message text,
dtypes and devices, the initial state, the gate parameters, ``lower_bound``, and the sequence boundaries
(``seqlens_on_cpu``, also read by `triton_kda.ops` and `triton_kda.cp`). Each raises a ``TypeError``/``ValueError``
whose message names the argument, what it got and what was expected.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import torch

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INDEX_DTYPES = (torch.int32, torch.int64)
_EXTRA_KWARGS = ("A_log", "dt_bias", "chunk_size", "transpose_state_layout")
_CHUNK_SIZES = (32, 64)
_MAX_K = 256
_SAFE_LOWER_BOUND = -5.0
_PREVIEW = 8


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
