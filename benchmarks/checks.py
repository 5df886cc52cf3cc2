"""The fp64 oracle gates of a benchmark case: the forward output on the first sequence's slice, and every gradient
on a small case with the same heads."""
from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from benchmarks.suites import Shape

# rel RMSE gates against the fp64 oracle: forward output on the slice, and every gradient on the small case
# (gates against gross errors, not precision targets: fp32 leaves room for tf32 dots, fp16 has 3 more mantissa
# bits than bf16)
FWD_TOL = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 5e-3}
BWD_TOL = {"bf16": 3e-2, "fp16": 1.5e-2, "fp32": 1e-2}
SLICE_TOKENS = 1024
GRAD_CHECK_TOKENS = 256
GRAD_NAMES = ("q", "k", "v", "g", "beta")


def first_sequence(shape: Shape, max_tokens: int) -> tuple[int, int]:
    """[start, stop) token range of the first non-empty sequence, truncated to ``max_tokens``."""
    start, length = 0, shape.T
    if shape.varlen:
        starts = itertools.accumulate(shape.seqlens, initial=0)
        start, length = next((s, n) for s, n in zip(starts, shape.seqlens, strict=False) if n > 0)
    return start, start + min(length, max_tokens)


def oracle_output(kwargs: dict, span: tuple[int, int]) -> torch.Tensor:
    """fp64 oracle output on batch 0, tokens ``span`` (one sequence, no initial state): ``[1, L, HV, V]``."""
    from reference.kda import kda_recurrent

    start, stop = span
    sub = {key: value for key, value in kwargs.items() if key not in ("cu_seqlens", "cu_seqlens_cpu")}
    for name in GRAD_NAMES:
        sub[name] = kwargs[name].detach()[:1, start:stop]
    with torch.no_grad():
        ref, _ = kda_recurrent(**sub)
    return ref


def small_case(shape: Shape) -> Shape:
    """The gradient-check case: one sequence of at most GRAD_CHECK_TOKENS tokens with the same heads, dims,
    dtype and varlen-ness (so fla's autotuning keys do not change)."""
    t = min(GRAD_CHECK_TOKENS, shape.T)
    if shape.varlen:
        return Shape(B=1, T=t, H=shape.H, HV=shape.HV, K=shape.K, V=shape.V, seqlens=(t,), dtype=shape.dtype,
                     tag="check")
    return Shape(B=1, T=t, H=shape.H, HV=shape.HV, K=shape.K, V=shape.V, dtype=shape.dtype)


def oracle_grads(kwargs: dict, do: torch.Tensor) -> dict[str, torch.Tensor]:
    """fp64 oracle gradients of ``sum(o * do)`` w.r.t. q, k, v, g, beta."""
    from reference.kda import kda_recurrent

    leaves = {name: kwargs[name].detach().double().requires_grad_(True) for name in GRAD_NAMES}
    ref, _ = kda_recurrent(**{**kwargs, **leaves})
    ref.backward(do.double())
    return {name: leaf.grad for name, leaf in leaves.items()}


def impl_grads(impl: Callable, kwargs: dict, do: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of ``sum(o * do)`` w.r.t. q, k, v, g, beta through ``impl``."""
    for name in GRAD_NAMES:
        kwargs[name].grad = None
    o, _ = impl(**kwargs)
    o.backward(do)
    return {name: kwargs[name].grad for name in GRAD_NAMES}


def grad_errors(grads: dict, ref: dict) -> dict[str, float]:
    """rel RMSE of each gradient (NaN where missing or non-finite)."""
    from reference.harness import rel_rmse

    errors = {}
    for name, r in ref.items():
        g = grads.get(name)
        ok = g is not None and g.shape == r.shape and bool(torch.isfinite(g).all())
        errors[name] = float(rel_rmse(g, r)) if ok else float("nan")
    return errors


def worst(errors: dict[str, float]) -> tuple[str, float]:
    """(name, error) of the largest error, NaN counting as the largest."""
    return max(errors.items(), key=lambda item: float("inf") if item[1] != item[1] else item[1])


def passes(error: float, tol: float) -> bool:
    """error <= tol, and never for NaN."""
    return error <= tol
