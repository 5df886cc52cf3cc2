"""Kernel launches that skip Triton's per-call argument binding once a launch like them has run.

``kernel[grid](...)`` specialises every argument on each call (tensor dtypes, 16-byte alignment of pointers, integer
values), builds a cache key and looks the compiled kernel up: tens of microseconds of host time per launch on a GPU
machine, and a training step makes several (a bf16 step took 2.2 ms of host time on an H100 machine,
docs/benchmarks/runs/2026-11-27_host_time). `launch_kernel` keys a call by the kernel, its grid, the current device, the
values of its non-tensor arguments and the dtypes of its tensors. The first such call with every tensor 16-byte
aligned goes through Triton and keeps the compiled kernel's launcher; later ones call that launcher directly with the
argument list Triton passes it (every parameter in order), so they run the same compiled kernel on the same
arguments. Calls with an unaligned tensor, kernels with parameters the call leaves to their defaults, and the CPU
interpreter always go through Triton. (decode.py keeps whole call plans instead: one launch there, no key to build.)
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import triton
from triton.compiler import CompiledKernel

from triton_kda.configs import is_interpreter

_OPTIONS = ("num_warps", "num_stages")  # launch options: not kernel parameters
_MAX_KEPT = 4096  # distinct launches kept per process; past it the table starts afresh
_KEPT: dict[tuple, tuple[Callable, tuple[str, ...]]] = {}


def _driver():
    """Triton's active driver (device and stream queries)."""
    return triton.runtime.driver.active


def clear_kept() -> None:
    """Forget every kept launcher (the next launches go through Triton again)."""
    _KEPT.clear()


def launch_kernel(kernel, grid: tuple, *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``; `args` are the kernel's leading parameters (tensors and scalars), `kwargs`
    the rest (constexprs) and the launch options."""
    if is_interpreter():
        kernel[grid](*args, **kwargs)
        return
    bits = 0
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            bits |= a.data_ptr()
            parts.append(a.dtype)
        else:
            parts.append(a)
    if bits & 15:
        kernel[grid](*args, **kwargs)
        return
    active = _driver()
    device = active.get_current_device()
    key = (kernel, grid, device, tuple(parts), tuple(kwargs.items()))
    kept = _KEPT.get(key)
    if kept is not None:
        runner, order = kept
        runner(*args, *(kwargs[n] for n in order), stream=active.get_current_stream(device))
        return
    compiled = kernel[grid](*args, **kwargs)
    order = tuple(kernel.arg_names[len(args):])
    if isinstance(compiled, CompiledKernel) and set(order) == set(kwargs) - set(_OPTIONS):
        if len(_KEPT) >= _MAX_KEPT:
            _KEPT.clear()
        _KEPT[key] = (compiled[(*grid, 1, 1)[:3]], order)
