"""Compile fla's autotuning candidates for some shapes in parallel worker processes, before a benchmark's fla calls.

fla tunes each of its kernels over all its configurations on the first call of a new shape, one process compiling
every candidate in turn: at K = V = 256 that outlasted 10-minute device calls (docs/benchmarks/NOTES.md at a24d737,
2026-11-25). A compiled kernel lands in the Triton cache under a key of its source, configuration and argument
specialisation, not of the process that compiled it. So N workers, each tuning only its share of every fla
autotuner's configurations (``configs[i::N]``), leave the cache holding every candidate, and the measuring process,
which tunes over all of them again on a quiet GPU (a tuning result is keyed by the whole configuration list, so the
workers' partial results are never reused), finds each compile already done. The workers share the GPU, so their
timings are discarded; only their compiled kernels are kept.

    python -m benchmarks.fla_prewarm --suite headdim --shapes K256 --flags kimi,pregated [--workers 8] [--budget-s 300]
    python -m benchmarks.fla_prewarm --gate-regimes bf16,fp16 [--workers 16]     # the gate-regime sweep's cases

`--budget-s` stops the workers after that many seconds (the cache keeps what they compiled so far); the workers also
stop when this process is terminated, so none is left sharing the GPU with the measurements that follow. Each worker
runs one fla fwd+bwd per shape and flag set on the benchmark's inputs and on its gradient-check case
(``benchmarks.checks.small_case``), as ``benchmarks.run`` does; with ``--gate-regimes DTYPES`` (alone, or beside a
``--suite``) also on every case of the gate-regime sweep (``reference.harness.regime_inputs``, seed 0) in those
dtypes, as ``benchmarks.gate_regimes`` and ``tests/test_vs_fla.py`` run them. Prints one line per worker and a
summary last.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

import torch
from triton.runtime.autotuner import Autotuner

from benchmarks.cases import TORCH_DTYPES, make_case_inputs, random_like_output
from benchmarks.checks import small_case
from benchmarks.cli import csv_choice, positive_int
from benchmarks.suites import FLAG_SETS, SUITES, resolve_flags, resolve_suites, select_shapes
from reference.harness import GATE_REGIMES, LAYOUTS, regime_inputs


def share_configs(index: int, workers: int, modules=None) -> int:
    """Keep configurations index, index + workers, ... of every autotuner in `modules` (default: the imported fla
    modules), each once; returns how many autotuners were cut."""
    if modules is None:
        modules = [m for name, m in list(sys.modules.items()) if name.startswith("fla.") and m is not None]
    cut = 0
    seen = set()
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, Autotuner) and id(value) not in seen:
                seen.add(id(value))
                value.configs = value.configs[index::workers] or value.configs[:1]
                cut += 1
    return cut


def warm(shapes, flag_sets, index: int, workers: int, regime_dtypes: tuple[str, ...] = ()) -> str:
    """One worker: fla fwd+bwd on every shape and flag set (and its gradient-check case), and on the gate-regime
    sweep's cases in `regime_dtypes`, with its share of the configurations."""
    from fla.ops.kda import chunk_kda as fla  # imports every module whose autotuners the calls use

    cut = share_configs(index, workers)
    device = torch.device("cuda")
    t0 = time.perf_counter()
    for shape in shapes:
        for flags in flag_sets:
            for s in (shape, small_case(shape)):
                kwargs = make_case_inputs(s, flags, device=device, seed=0, requires_grad=True)
                o, _ = fla(**kwargs)
                o.backward(random_like_output(s, device=device, seed=1))
                del kwargs, o
            torch.cuda.synchronize()
    for dtype in regime_dtypes:
        for regime in GATE_REGIMES:
            for layout in LAYOUTS:
                kwargs = regime_inputs(regime, layout, TORCH_DTYPES[dtype], 0, device=device)
                leaves = [kwargs[n].requires_grad_(True) for n in ("q", "k", "v", "g", "beta")]
                o, ht = fla(**kwargs)
                torch.autograd.grad([o, ht], leaves, [torch.randn_like(o), torch.randn_like(ht)])
                del kwargs, o, ht
        torch.cuda.synchronize()
    return f"worker {index}/{workers}: {cut} autotuners, {time.perf_counter() - t0:.1f} s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fla_prewarm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=csv_choice(tuple(SUITES)), default=None,
                        help="shape suites (default: headdim, unless --gate-regimes is given alone)")
    parser.add_argument("--shapes", type=lambda text: tuple(filter(None, text.split(","))), default=(),
                        help="keep the suite shapes whose label contains one of these (as benchmarks.run)")
    parser.add_argument("--flags", type=csv_choice(tuple(FLAG_SETS)), default=["kimi"])
    parser.add_argument("--gate-regimes", type=csv_choice(tuple(TORCH_DTYPES)), default=[],
                        help="also the gate-regime sweep's cases in these dtypes (bf16, fp16, fp32)")
    parser.add_argument("--workers", type=positive_int, default=8)
    parser.add_argument("--budget-s", type=positive_int, default=None, help="stop the workers after this long")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    suites = args.suite if args.suite is not None else ([] if args.gate_regimes else ["headdim"])
    shapes = [s for suite in resolve_suites(suites).values() for s in select_shapes(suite, labels=args.shapes)]
    if suites and not shapes:
        raise SystemExit(f"no shape of {suites} matches {args.shapes}")
    if args.worker is not None:
        print(warm(shapes, resolve_flags(args.flags), args.worker, args.workers, tuple(args.gate_regimes)), flush=True)
        return 0
    t0 = time.perf_counter()
    base = [sys.executable, "-m", "benchmarks.fla_prewarm", "--shapes", ",".join(args.shapes), "--flags",
            ",".join(args.flags), "--workers", str(args.workers)]
    base += ["--suite", ",".join(suites)] if suites else []
    base += ["--gate-regimes", ",".join(args.gate_regimes)] if args.gate_regimes else []
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # unwinds through the finally below
    procs = [subprocess.Popen([*base, "--worker", str(i)]) for i in range(args.workers)]
    try:
        for p in procs:
            left = None if args.budget_s is None else max(0.0, args.budget_s - (time.perf_counter() - t0))
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                break
    finally:
        stopped = stop(procs)
        signal.signal(signal.SIGTERM, previous)
    codes = [p.returncode for p in procs]
    print(f"summary: {args.workers} workers, exit codes {codes} ({stopped} stopped), "
          f"{time.perf_counter() - t0:.1f} s for {len(shapes)} shape(s) x {len(args.flags)} flag set(s)"
          + (f" and the gate regimes in {','.join(args.gate_regimes)}" if args.gate_regimes else ""), flush=True)
    return 0 if all(c == 0 for c in codes) else 1


def stop(procs: list[subprocess.Popen]) -> int:
    """Terminate (then kill) the workers still running; returns how many were."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    for p in running:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return len(running)


if __name__ == "__main__":
    sys.exit(main())
