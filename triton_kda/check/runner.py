"""Run one `CheckConfig` on every backend and compare each output and gradient with the fp64 oracle.

Backends: our `chunk_kda` on every config; on decode configs (`is_decode`: sequences of at most DECODE_MAX_T tokens)
also our `fused_recurrent_kda` (forward and backward) and, forward only, the same through a state pool updated in
place (`recurrent_pool_kda`) and, on a GPU with fla, fla's `fused_recurrent_kda` (bf16, informational).
The oracle is `reference.kda.kda_recurrent` on fp64 copies of the same random inputs; gradients come from autograd
through it with the same random upstream gradients (do, dht) the backend receives, rounded as it receives them.
Every compared tensor becomes one `Row`; a backend that raises, returns NaN/Inf or a wrong shape gives failed rows
with the reason.
"""
from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from reference.harness import environ, make_inputs, max_abs, rel_rmse, rel_to_terms
from reference.kda import kda_gate_terms, kda_recurrent_gated
from triton_kda import chunk_kda, fused_recurrent_kda
from triton_kda.backends import ENV_VAR as BACKEND_ENV_VAR
from triton_kda.backends import BackendDeclined, cuda_capability, registered
from triton_kda.check.grid import CheckConfig

__all__ = ["DECODE_MAX_T", "Backend", "Row", "available_backends", "check_config", "failed_rows", "fla_sample",
           "is_decode", "recurrent_kda", "recurrent_pool_kda", "threshold", "upstream_grads"]

# chunk_kda input -> name of its gradient in the table
GRAD_NAMES = {
    "q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta",
    "A_log": "dA_log", "dt_bias": "ddt_bias", "initial_state": "dh0",
}
# relative RMSE tolerances for half-precision runs (fp16, bf16), per compared tensor
_HALF_THRESHOLDS = {
    "o": 5e-3, "final_state": 5e-3,
    "dq": 8e-3, "dk": 8e-3, "dv": 8e-3,
    "dg": 2e-2, "dbeta": 2e-2,
    "dA_log": 1e-2, "ddt_bias": 1e-2, "dh0": 1e-2,
}
_FP32_THRESHOLD = 1e-5
_UPSTREAM_SEED = 1234
_POOL_SEED = 4321
DECODE_MAX_T = 16
# chunk_kda keywords that fused_recurrent_kda does not take
_CHUNK_ONLY = ("safe_gate", "chunk_size")


def threshold(tensor: str, dtype: str) -> float:
    """Relative-RMSE tolerance for `tensor` (a key of the table, e.g. "o", "dq", "dh0") in a run of `dtype`
    ("fp32", "fp16" or "bf16"): 1e-5 for everything in fp32; per tensor for fp16/bf16."""
    if tensor not in _HALF_THRESHOLDS:
        raise ValueError(f"threshold: `tensor` must be one of {sorted(_HALF_THRESHOLDS)}, got {tensor!r}")
    if dtype == "fp32":
        return _FP32_THRESHOLD
    if dtype in ("fp16", "bf16"):
        return _HALF_THRESHOLDS[tensor]
    raise ValueError(f"threshold: `dtype` must be 'fp32', 'fp16' or 'bf16', got {dtype!r}")


@dataclass(frozen=True)
class Backend:
    """A `chunk_kda` implementation: `fn` takes chunk_kda's keyword arguments and returns (o, final_state).
    Rows of an informational backend are shown with their pass/fail but never fail the run. `env` pins choices made
    from the environment, e.g. TRITON_KDA_BACKEND=triton so that rows named "triton" are the Triton path."""

    name: str
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
    informational: bool = False
    env: tuple[tuple[str, str], ...] = ()  # environment variables set while it runs forward and backward
    only: Callable[[CheckConfig], bool] | None = None  # the configs it runs (None: every one)
    backward: bool = True  # False: forward rows only (no autograd through it)


@dataclass(frozen=True)
class Row:
    """One compared tensor: errors of `backend` on `config` (a CheckConfig id) against the fp64 oracle.
    rel_rmse and max_abs are NaN when nothing could be compared; then `reason` says why. rel_terms (dA_log and
    ddt_bias, sums of many terms per element; else None): the error over the oracle's sum of |terms|
    (`rel_to_terms`), which `threshold` judges there instead of rel_rmse."""

    config: str
    backend: str
    tensor: str
    rel_rmse: float
    max_abs: float
    threshold: float
    passed: bool
    informational: bool = False
    reason: str = ""
    rel_terms: float | None = None


def is_decode(config: CheckConfig) -> bool:
    """Sequences of at most DECODE_MAX_T tokens: the configs `fused_recurrent_kda` is checked on."""
    return (max(config.seqlens) if config.seqlens is not None else config.T) <= DECODE_MAX_T


def _recurrent_kwargs(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in _CHUNK_ONLY}


def recurrent_kda(**kwargs):
    """Our `fused_recurrent_kda` on chunk_kda's keyword arguments."""
    return fused_recurrent_kda(**_recurrent_kwargs(kwargs))


def recurrent_pool_kda(**kwargs):
    """Our `fused_recurrent_kda` through a state pool updated in place (forward only): the initial states are put
    into random slots of a pool of 2N + 1 random states (zeros without initial_state), indexed by int32
    ssm_state_indices; returns (o, the named slots after the call, or None without output_final_state)."""
    kwargs = _recurrent_kwargs(kwargs)
    h0, want_ht = kwargs.pop("initial_state", None), kwargs.pop("output_final_state")
    q, v = kwargs["q"], kwargs["v"]
    N = q.shape[0] if kwargs.get("cu_seqlens") is None else kwargs["cu_seqlens"].shape[0] - 1
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    state = (HV, V, K) if kwargs["state_v_first"] else (HV, K, V)
    gen = torch.Generator().manual_seed(_POOL_SEED)
    slots = torch.randperm(2 * N + 1, generator=gen)[:N].to(q.device)
    with torch.no_grad():
        pool = torch.randn(2 * N + 1, *state, generator=gen).to(q.device)
        pool[slots] = h0.detach() if h0 is not None else 0.0
        o, _ = fused_recurrent_kda(**kwargs, initial_state=pool, ssm_state_indices=slots.to(torch.int32),
                                   inplace_final_state=True)
    return o, pool[slots] if want_ht else None


def _fla_recurrent(**kwargs):
    """fla's `fused_recurrent_kda` on chunk_kda's keyword arguments (forward only: it has no backward)."""
    from fla.ops.kda import fused_recurrent_kda as fla_fused_recurrent_kda

    return fla_fused_recurrent_kda(**{k: v for k, v in _recurrent_kwargs(kwargs).items() if k != "cu_seqlens_cpu"})


def _fla_decode_sample(config: CheckConfig) -> bool:
    return is_decode(config) and config.dtype == "bf16"


def available_backends(device: torch.device, *, fla: bool = True, fla_all: bool = False) -> list[Backend]:
    """Every backend that can run on `device`: our Triton `chunk_kda` always (through the interpreter on CPU), and
    on decode configs our `fused_recurrent_kda` ("recurrent") and the same through an in-place state pool
    ("recurrent_pool", forward only); each compiled backend of `triton_kda.backends` that supports the device's
    compute capability (`chunk_kda` with TRITON_KDA_BACKEND naming it; it gives rows only for the configs it takes);
    and with `fla`, when fla is installed and `device` is a CUDA device, fla's `chunk_kda` as an informational
    backend on the `fla_sample` configs unless `fla_all` (fla autotunes for minutes on every new shape) and fla's
    `fused_recurrent_kda` ("fla_recurrent", forward only) on the bf16 decode configs."""
    backends = [Backend("triton", chunk_kda, env=((BACKEND_ENV_VAR, "triton"),)),
                Backend("recurrent", recurrent_kda, only=is_decode),
                Backend("recurrent_pool", recurrent_pool_kda, only=is_decode, backward=False)]
    capability = cuda_capability(device)
    if capability is not None:
        backends += [Backend(b.name, chunk_kda, env=((BACKEND_ENV_VAR, b.name),))
                     for b in registered() if b.supports(capability)]
    if fla and device.type == "cuda" and importlib.util.find_spec("fla") is not None:
        from fla.ops.kda import chunk_kda as fla_chunk_kda

        backends.append(Backend("fla", fla_chunk_kda, informational=True, only=None if fla_all else fla_sample))
        backends.append(Backend("fla_recurrent", _fla_recurrent, informational=True, only=_fla_decode_sample,
                                backward=False))
    return backends


def fla_sample(config: CheckConfig) -> bool:
    """The configs fla runs by default: the bf16 ones with the gate in the kernel (every gate form and regime)."""
    return config.dtype == "bf16" and config.use_gate_in_kernel


def _call_kwargs(config: CheckConfig, device: torch.device) -> dict:
    kwargs = make_inputs(
        config.B, config.T, config.H, config.HV, config.K, config.V,
        dtype=config.torch_dtype, device=device, seqlens=list(config.seqlens) if config.seqlens is not None else None,
        gate=config.gate, use_gate_in_kernel=config.use_gate_in_kernel, lower_bound=config.lower_bound,
        use_beta_sigmoid_in_kernel=config.use_beta_sigmoid_in_kernel,
        use_qk_l2norm_in_kernel=config.use_qk_l2norm_in_kernel, allow_neg_eigval=config.allow_neg_eigval,
        initial_state=config.initial_state, state_v_first=config.state_v_first,
        output_final_state=config.output_final_state, seed=0,
    )
    return kwargs | {"safe_gate": config.safe_gate, "chunk_size": config.chunk_size}


def _leaves(kwargs: dict, names: list[str], dtype: torch.dtype | None, requires_grad: bool) -> dict:
    """Copy of `kwargs` whose `names` tensors are fresh leaves (cast to `dtype` unless it is None)."""
    out = dict(kwargs)
    for n in names:
        t = kwargs[n].detach()
        out[n] = (t.to(dtype) if dtype is not None else t.clone()).requires_grad_(requires_grad)
    return out


def failed_rows(config: CheckConfig, backend: Backend, tensors: list[str], reason: str) -> list[Row]:
    """A failed row (no errors, `reason`) for each of `tensors` of `backend` on `config`."""
    return [Row(config.id, backend.name, t, math.nan, math.nan, threshold(t, config.dtype), False,
                backend.informational, reason) for t in tensors]


def _compare(config: CheckConfig, backend: Backend, tensor: str, actual, ref: torch.Tensor,
             terms: torch.Tensor | None = None) -> Row:
    """The row of `tensor`; `terms`: the oracle's sum of |terms| of dA_log or ddt_bias (then judged by it)."""
    thr = threshold(tensor, config.dtype)

    def failed(reason: str) -> Row:
        return failed_rows(config, backend, [tensor], reason)[0]

    if actual is None:
        return failed("not returned")
    if tuple(actual.shape) != tuple(ref.shape):
        return failed(f"shape {tuple(actual.shape)}, expected {tuple(ref.shape)}")
    actual = actual.detach()
    bad = int((~torch.isfinite(actual)).sum())
    if bad:
        return failed(f"{bad} non-finite values (NaN/Inf)")
    rel, mx = float(rel_rmse(actual, ref)), float(max_abs(actual, ref))
    rt = float(rel_to_terms(actual, ref, terms)) if terms is not None else None
    passed = (rel if terms is None else rt) <= thr
    return Row(config.id, backend.name, tensor, rel, mx, thr, passed, backend.informational,
               "" if passed else "above threshold", rt)


def upstream_grads(config: CheckConfig, refs: dict[str, torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Random fp64 gradients for the outputs in `refs` (o, then final_state), each rounded to the dtype of the
    output it flows into (o: the config's dtype, final_state: fp32): the oracle and the backend see the same values,
    so rounding the caller's gradient is not counted as the backend's error."""
    gen = torch.Generator(device=device).manual_seed(_UPSTREAM_SEED)
    return [torch.randn(r.shape, generator=gen, dtype=torch.float64, device=device)
            .to(config.torch_dtype if name == "o" else torch.float32).double() for name, r in refs.items()]


def check_config(config: CheckConfig, backends: list[Backend], device: torch.device, *,
                 backward: bool = True) -> list[Row]:
    """Rows for `config` on each backend: o (and final_state when output), then with `backward` the gradient of
    every differentiable input (dq, dk, dv, dg, dbeta, and dA_log, ddt_bias, dh0 when those inputs exist)."""
    kwargs = _call_kwargs(config, device)
    grad_inputs = [n for n in GRAD_NAMES if isinstance(kwargs.get(n), torch.Tensor) and kwargs[n].is_floating_point()]

    ref_kwargs = _leaves(kwargs, grad_inputs, torch.float64, backward)
    o_ref, ht_ref, gate = kda_recurrent_gated(**ref_kwargs)
    refs = {"o": o_ref} | ({"final_state": ht_ref} if ht_ref is not None else {})
    upstream, terms = None, {}
    if backward:
        upstream = upstream_grads(config, refs, device)
        wrt = [ref_kwargs[n] for n in grad_inputs] + ([gate] if gate is not None else [])
        ref_grads = torch.autograd.grad(list(refs.values()), wrt, upstream, allow_unused=True)
        for n, gr in zip(grad_inputs, ref_grads[:len(grad_inputs)], strict=True):
            refs[GRAD_NAMES[n]] = gr if gr is not None else torch.zeros_like(ref_kwargs[n])
        if gate is not None:
            sums = kda_gate_terms(ref_grads[-1], ref_kwargs["g"], ref_kwargs.get("A_log"), ref_kwargs.get("dt_bias"),
                                  config.lower_bound)
            terms = {GRAD_NAMES[n]: t for n, t in sums.items()}

    rows = []
    for backend in backends:
        if backend.only is None or backend.only(config):
            rows += _check_backend(config, backend, kwargs, grad_inputs, refs, upstream, terms)
    return rows


def _raised(stage: str, e: Exception) -> str:
    """One-line reason for an exception: its type and the first line of its message, cut to 200 characters."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{stage} raised {type(e).__name__}: {first[:200]}"


def _check_backend(config: CheckConfig, backend: Backend, kwargs: dict, grad_inputs: list[str],
                   refs: dict[str, torch.Tensor], upstream: list[torch.Tensor] | None,
                   terms: dict[str, torch.Tensor]) -> list[Row]:
    with environ(dict(backend.env)):
        return _run_backend(config, backend, kwargs, grad_inputs, refs, upstream, terms)


def _run_backend(config: CheckConfig, backend: Backend, kwargs: dict, grad_inputs: list[str],
                 refs: dict[str, torch.Tensor], upstream: list[torch.Tensor] | None,
                 terms: dict[str, torch.Tensor]) -> list[Row]:
    fwd_names = ["o", "final_state"][: 2 if "final_state" in refs else 1]
    bwd_names = [n for n in refs if n not in fwd_names]

    def all_failed(names: list[str], reason: str) -> list[Row]:
        return failed_rows(config, backend, names, reason)

    call_kwargs = _leaves(kwargs, grad_inputs, None, upstream is not None)
    try:
        o, ht = backend.fn(**call_kwargs)
    except BackendDeclined:  # a compiled backend that does not take this config: no rows
        return []
    except Exception as e:  # any failure of the backend is a result to report, not a crash of the tool
        return all_failed(fwd_names + bwd_names, _raised("forward", e))
    outputs = [o, ht][: len(fwd_names)]
    rows = [_compare(config, backend, n, out, refs[n]) for n, out in zip(fwd_names, outputs, strict=True)]
    if upstream is None or not backend.backward:
        return rows
    if any(out is None for out in outputs):
        return rows + all_failed(bwd_names, "forward output missing")
    detached = [n for n, out in zip(fwd_names, outputs, strict=True) if not out.requires_grad]
    if detached:
        return rows + all_failed(bwd_names, f"{', '.join(detached)} returned without grad_fn (not differentiable)")
    try:
        grads = torch.autograd.grad(outputs, [call_kwargs[n] for n in grad_inputs],
                                    [u.to(out.dtype) for u, out in zip(upstream, outputs, strict=True)],
                                    allow_unused=True)
    except NotImplementedError:
        return rows + all_failed(bwd_names, "backward not implemented")
    except Exception as e:  # as above: report it
        return rows + all_failed(bwd_names, _raised("backward", e))
    return rows + [
        _compare(config, backend, GRAD_NAMES[n], gr, refs[GRAD_NAMES[n]], terms.get(GRAD_NAMES[n]))
        for n, gr in zip(grad_inputs, grads, strict=True)
    ]
