"""Each kernel of a fwd+bwd step against its memory floor, for one or more copies of the package side by side.

    python -m benchmarks.roofline [--pkg head=.:triton_kda] [--shape B2-T8192-H32[-HV64][-K256]] [--dtype bf16]
    python -m benchmarks.roofline --pkg triton=.:triton_kda@TRITON_KDA_SM90_BWD=0 \\
        --pkg cuda=.:triton_kda@TRITON_KDA_SM90_BWD=1
    python -m benchmarks.roofline --pkg old=.base:triton_kda_old --pkg new=.:triton_kda

A package spec is NAME=DIR:MODULE (DIR is put first on sys.path, MODULE's ``chunk_kda`` is called), optionally
ending in ``@VAR=VALUE``: every step of that package sets the environment variable first (and leaves it set, since
the backward reads it after the forward returns: give every package its setting).

The step is `chunk_kda` with Kimi Linear's flags (l2norm, gate in kernel with A_log and dt_bias, safe_gate,
lower_bound -5, beta sigmoid) on random inputs of the shape, then the backward of a fixed upstream gradient. Per
kernel and package: its CUDA time per step (torch.profiler, mean over --steps steps); the bytes of the distinct
tensors its launches take (each tensor argument once per launch, by address: one read or write of each), and of
the compiled chunk-local backward's launches (cuda_fast.sm90_bwd, from the tensors whose pointers it passes); and
that traffic at the copy bandwidth measured in the same process as the kernel's floor (``% of floor`` = floor /
time). Products are not counted. Kernels launched by torch (the .grad accumulation, casts) are listed with their
time only; our other compiled kernels (names with ``kda_``) too, and their time counts in the total. Needs a CUDA
GPU; the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import re
import sys
from collections.abc import Callable

import torch

from benchmarks.cases import TORCH_DTYPES
from benchmarks.suites import Shape, parse_shape
from benchmarks.timing import copy_bandwidth_tbps, cuda_timer

KIMI = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
            use_beta_sigmoid_in_kernel=True)
COMPILED = "kda_intra_bwd_kernel<"  # the profiler's name of the compiled backward starts so (templated per K, form)


def load_spec(spec: str) -> tuple[str, Callable]:
    """NAME=DIR:MODULE[@VAR=VALUE] -> (NAME, that module's chunk_kda, setting VAR=VALUE before each call)."""
    spec, _, env = spec.partition("@")
    try:
        name, where = spec.split("=", 1)
        path, module = where.split(":", 1)
    except ValueError:
        raise ValueError(f"--pkg: expected NAME=DIR:MODULE[@VAR=VALUE], got {spec!r}") from None
    sys.path.insert(0, os.path.abspath(path))
    fn = importlib.import_module(module).chunk_kda
    if not env:
        return name, fn
    var, value = env.split("=", 1)

    def with_env(**kw):
        os.environ[var] = value
        return fn(**kw)

    return name, with_env


def step_shape(text: str) -> Shape:
    """`benchmarks.suites.parse_shape`, but V = K unless V is given ("B2-T8192-H16-K256": K = V = 256)."""
    shape = parse_shape(text)
    return shape if re.search(r"(^|-)V\d", text) else dataclasses.replace(shape, V=shape.K)


def step_inputs(shape: Shape, dtype: torch.dtype, device: str = "cuda") -> tuple[dict, torch.Tensor]:
    """Leaves requiring grad (q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K]; beta [B, T, HV]; A_log [HV];
    dt_bias [HV * K]) and the upstream gradient of o [B, T, HV, V]."""
    gen = torch.Generator(device=device).manual_seed(0)
    B, T, H, HV, K, V = shape.B, shape.T, shape.H, shape.HV, shape.K, shape.V

    def rn(*s):
        return torch.randn(*s, generator=gen, device=device)

    d = dict(q=rn(B, T, H, K).to(dtype), k=rn(B, T, H, K).to(dtype), v=rn(B, T, HV, V).to(dtype),
             g=rn(B, T, HV, K).to(dtype), beta=rn(B, T, HV).to(dtype),
             A_log=torch.log(1 + 15 * torch.rand(HV, generator=gen, device=device)), dt_bias=0.1 * rn(HV * K))
    for t in d.values():
        t.requires_grad_(True)
    return d, rn(B, T, HV, V).to(dtype)


def step(fn: Callable, d: dict, do: torch.Tensor) -> None:
    """One fwd+bwd step; the gradients are dropped so steps do not accumulate."""
    o, _ = fn(**d, **KIMI)
    torch.autograd.backward(o, do)
    for t in d.values():
        t.grad = None


def kernel_times(fn: Callable, d: dict, do: torch.Tensor, steps: int) -> dict[str, float]:
    """Mean CUDA time per step (us) of each kernel that `steps` steps launch (after 3 warm-up steps)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step(fn, d, do)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(fn, d, do)
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            out[e.key] = t / steps
    return out


class _KeepNothing(dict):
    """A kept-launch table that keeps nothing (every launch then goes through Triton)."""

    def __setitem__(self, key, value) -> None:
        pass


@contextlib.contextmanager
def launches_through_triton():
    """Within it, every loaded package's `launch_kernel` (a module ``<pkg>.launch`` with a ``_KEPT`` table) sends
    each launch through ``kernel[grid](...)``, where `launch_bytes` sees it: a kept launcher would bypass it."""
    mods = [m for n, m in list(sys.modules.items()) if n.endswith(".launch") and isinstance(getattr(m, "_KEPT", None),
                                                                                            dict)]
    saved = [m._KEPT for m in mods]
    for m in mods:
        m._KEPT = _KeepNothing()
    try:
        yield
    finally:
        for m, kept in zip(mods, saved, strict=True):
            m._KEPT = kept


def launch_bytes(fn: Callable, d: dict, do: torch.Tensor) -> dict[str, int]:
    """Bytes of the distinct tensor arguments of every Triton launch of one step, summed per kernel name, and of the
    compiled backward's launches (under COMPILED)."""
    import triton

    import cuda_fast.sm90_bwd as sm90_bwd

    run, ptr = triton.runtime.jit.JITFunction.run, sm90_bwd._ptr
    out: dict[str, int] = {}
    compiled: dict[int, int] = {}

    def distinct(args) -> int:
        seen: dict[int, int] = {}
        for a in args:
            if isinstance(a, torch.Tensor):
                seen[a.data_ptr()] = max(seen.get(a.data_ptr(), 0), a.numel() * a.element_size())
        return sum(seen.values())

    def recording_ptr(x):
        if isinstance(x, torch.Tensor):
            compiled[x.data_ptr()] = max(compiled.get(x.data_ptr(), 0), x.numel() * x.element_size())
        return ptr(x)

    def counting(self, *args, **kwargs):
        out[self.fn.__name__] = out.get(self.fn.__name__, 0) + distinct((*args, *kwargs.values()))
        return run(self, *args, **kwargs)

    triton.runtime.jit.JITFunction.run, sm90_bwd._ptr = counting, recording_ptr
    try:
        with launches_through_triton():
            step(fn, d, do)
            torch.cuda.synchronize()
    finally:
        triton.runtime.jit.JITFunction.run, sm90_bwd._ptr = run, ptr
    if compiled:
        out[COMPILED] = sum(compiled.values())
    return out


def table(name: str, times: dict[str, float], nbytes: dict[str, int], tbps: float) -> tuple[list[str], float, float]:
    """Markdown rows of one package (costliest kernel first) and its totals (us, floor us) over our kernels."""
    rows, tot_us, tot_floor = [], 0.0, 0.0
    for k, us in sorted(times.items(), key=lambda kv: -kv[1]):
        b = nbytes.get(COMPILED if COMPILED in k else k)
        if b is None:
            if "kda_" in k:  # ours without counted bytes (a compiled kernel other than COMPILED): time, no floor
                tot_us += us
            rows.append(f"| {name} | {k[:50]} | {us:.1f} | - | - | - |")
            continue
        floor = b / (tbps * 1e12) * 1e6
        tot_us, tot_floor = tot_us + us, tot_floor + floor
        rows.append(f"| {name} | {k[:50]} | {us:.1f} | {b / 1e6:.0f} | {floor:.1f} | {100 * floor / us:.0f}% |")
    pct = 100 * tot_floor / tot_us if tot_us else 0.0
    rows.append(f"| {name} | our kernels | {tot_us:.1f} | | {tot_floor:.1f} | {pct:.0f}% |")
    return rows, tot_us, tot_floor


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pkg", action="append",
                    help="NAME=DIR:MODULE[@VAR=VALUE] (repeatable; default head=.:triton_kda)")
    ap.add_argument("--shape", default="B2-T8192-H32",
                    help="B<n>-T<n>-H<n>[-HV<n>][-K<n>][-V<n>] (HV = H, K = V = 128 unless given)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--steps", type=int, default=10, help="profiled steps per package")
    args = ap.parse_args(argv)
    shape = step_shape(args.shape)
    if not torch.cuda.is_available():
        print("benchmarks.roofline needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    fns = dict(load_spec(s) for s in args.pkg or ["head=.:triton_kda"])
    tbps = copy_bandwidth_tbps(cuda_timer(25, 200), torch.device("cuda"))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy bandwidth {tbps:.2f} TB/s", flush=True)
    d, do = step_inputs(shape, TORCH_DTYPES[args.dtype])
    rows = [f"{args.shape} {args.dtype}, per fwd+bwd step: us (torch.profiler, {args.steps} steps), MB of distinct "
            f"tensor arguments, % of the floor (those bytes at {tbps:.2f} TB/s)",
            "| package | kernel | us | MB | floor us | % of floor |", "|---|---|---:|---:|---:|---:|"]
    totals = {}
    for name, fn in fns.items():
        part, us, floor = table(name, kernel_times(fn, d, do, args.steps), launch_bytes(fn, d, do), tbps)
        rows += part
        totals[name] = (us, floor)
    print("\n".join(rows))
    print("summary: " + "; ".join(f"{n} {us:.0f} us of our kernels per step, floor {fl:.0f} us "
                                  f"({100 * fl / us if us else 0:.0f}%)" for n, (us, fl) in totals.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
