"""Host-side time of one decode step of ours, on any machine (no GPU needed): the part of `benchmarks.decode`'s
do_bench figures that CUDA graphs remove, split by stage, with and without the plans `fused_recurrent_kda` keeps
per call signature.

    TRITON_INTERPRET=1 python3 docs/benchmarks/scripts/decode_host_overhead.py [--B 64] [--calls 2000]

The step: Kimi flags, bf16, H = HV = 32, K = V = 128, T = 1, a pool of 1024 slots, check_indices=False as in the
benchmark. The kernel launch is replaced by a stand-in that returns a compiled kernel whose launcher does nothing,
so the call after the first of a signature takes the path it takes on a GPU (the direct launch), less the launcher
itself and the current device / stream queries. Prints microseconds per call (best of 5 rounds):
- without plans (`recurrent.FAST_PATH = False`, the path before the plans): the whole call, then its stages timed
  alone: validation, the launch plan (configuration table, constexprs, grid), the output allocation;
- Triton's own per-call work in `JITFunction.run` for the same launch that runs without a GPU: the argument binder
  (specialization of every argument) and the kernel-cache key, with a binder built for sm_90; the rest of Triton's
  launch (device and stream queries, launch metadata, the C launcher's argument parsing with one driver pointer
  query per tensor) needs a GPU: `python -m benchmarks.decode_check` times whole calls there;
- with plans: the whole call, and the signature key alone;
then a cProfile of calls with plans.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import timeit

import torch
from triton.compiler import CompiledKernel

sys.path.insert(0, os.getcwd())

import triton_kda.recurrent as recurrent  # noqa: E402
from benchmarks import decode  # noqa: E402
from benchmarks.suites import FLAG_SETS, Shape  # noqa: E402


class _Compiled(CompiledKernel):
    """A compiled kernel whose launcher does nothing."""

    def __getitem__(self, grid):
        return lambda *args, stream: None


class _StandIn:
    """The JIT kernel, minus the launch: remembers the last launch's arguments and returns a `_Compiled`."""

    def __init__(self, kernel):
        self.kernel, self.arg_names, self.last = kernel, kernel.arg_names, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.last = args, kwargs
            return object.__new__(_Compiled)
        return launch


def best_us(fn, calls: int) -> float:
    for _ in range(50):
        fn()
    return min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e6


def binder_us(kernel, args: tuple, kwargs: dict, calls: int) -> tuple[float, float]:
    """(binder, binder + cache key) microseconds of `kernel`'s JITFunction.run for one launch's arguments, with the
    binder Triton builds for an sm_90 target (`create_binder` less the device query)."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import compute_cache_key, create_function_from_signature

    binder = create_function_from_signature(kernel.signature, kernel.params, make_backend(GPUTarget("cuda", 90, 32)))
    key_cache = {}

    def run():
        options = dict(kwargs, debug=kwargs.get("debug", kernel.debug) or knobs.runtime.debug,
                       instrumentation_mode=knobs.compilation.instrumentation_mode)
        _, specialization, options = binder(*args, **options)
        return compute_cache_key(key_cache, specialization, options)

    return best_us(lambda: binder(*args, **kwargs), calls), best_us(run, calls)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    from triton.runtime.jit import JITFunction

    jit_kernel = JITFunction(recurrent._kda_recurrent_fwd_kernel.fn)  # a GPU's JIT kernel, also under the interpreter
    stand_in = _StandIn(jit_kernel)
    recurrent._kda_recurrent_fwd_kernel = stand_in
    recurrent._device_stream = lambda: (0, 0)
    shape = Shape(B=args.B, T=1, H=32, HV=32)
    inputs = decode.step_inputs(shape, FLAG_SETS["kimi"], torch.device("cpu"))
    pool, idx = decode.make_pool(shape, 1024, torch.device("cpu"))
    torch.set_grad_enabled(False)
    print(f"B{args.B}, Kimi flags, bf16, H = HV = 32, K = V = 128, T = 1, pool of 1024 slots; us per call")

    recurrent.FAST_PATH = False
    off = best_us(lambda: decode.ours(inputs, pool, idx), args.calls)
    d = {**inputs, "initial_state": pool, "ssm_state_indices": idx, "inplace_final_state": True,
         "check_indices": False}
    kwargs = {n: d[n] for n in ("ssm_state_indices", "inplace_final_state", "check_indices")}
    names = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "scale", "initial_state", "output_final_state",
             "use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
             "lower_bound", "state_v_first")
    positional = [d.get(n) for n in names]

    def validate():
        return recurrent.validate_fused_recurrent_kda(*positional, None, idx, None, True, None, None, False, kwargs)

    p = validate()
    flags = dict(use_qk_l2norm_in_kernel=True, gate=2, lower_bound=float(d["lower_bound"]),
                 use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False)
    q, v = d["q"], d["v"]
    stages = {
        "validation (validate_fused_recurrent_kda)": validate,
        "launch plan (_FwdPlan: configuration, constexprs, grid)": lambda: recurrent._FwdPlan(
            q, pool, idx, None, None, p, flags, inplace=True, output_final_state=False, keep=False),
        "output allocation (torch.empty_like)": lambda: torch.empty_like(v, memory_format=torch.contiguous_format),
    }
    print(f"without plans: {off:.1f}")
    timed = {label: best_us(fn, args.calls) for label, fn in stages.items()}
    for label, us in timed.items():
        print(f"  {label}: {us:.1f}")
    print(f"  the rest (argument handling, contiguity, launch arguments, the stand-in): {off - sum(timed.values()):.1f}")
    launch_args, launch_kwargs = stand_in.last
    bind, bind_key = binder_us(jit_kernel, launch_args, launch_kwargs, args.calls)
    print(f"Triton's JITFunction.run on a GPU, the part this machine runs: binder {bind:.1f}, binder + cache key "
          f"{bind_key:.1f} ({len(launch_args)} positional, {len(launch_kwargs)} keyword arguments)")

    recurrent.FAST_PATH = True
    recurrent.clear_plans()
    on = best_us(lambda: decode.ours(inputs, pool, idx), args.calls)
    flag_tuple = (False, True, True, True, False, False, True, False)
    key = best_us(lambda: recurrent._signature(q, d["k"], v, d["g"], d["beta"], d["A_log"], d["dt_bias"], None,
                                               pool, d["lower_bound"], None, idx, None, None, None, kwargs,
                                               flag_tuple), args.calls)
    print(f"with plans: {on:.1f} (the signature key {key:.1f}; direct launch, its launcher a no-op)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        decode.ours(inputs, pool, idx)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
