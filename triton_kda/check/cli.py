"""Command line: `kda-check` (numerical regression against the fp64 oracle) and `kda-portability` (ahead-of-time
compiles for the CUDA GPU's architecture, sm_89 and sm_90 without one, or any of the six supported ones).

Exit codes: 0 all rows pass, 1 a row fails (tolerance, NaN, error, baseline regression, shared-memory limit) or the
portability workers could not start, 2 bad usage (bad arguments, unreadable baseline, a filter that matches nothing),
130 interrupted (Ctrl-C during portability compiles).

Triton decides at `triton.jit` time whether a kernel runs through its CPU interpreter, and importing this module
already imports the kernels. So when the interpreter mode of this process is not the one the run needs (on for a
check without CUDA, off for portability compiles), the command runs itself again in a child process with
TRITON_INTERPRET set accordingly and returns the child's exit code.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import pandas as pd
import torch
import triton
from tqdm import tqdm

from triton_kda.check.baseline import compare_baseline, load_baseline, save_baseline
from triton_kda.check.grid import CheckConfig, full_grid, quick_grid
from triton_kda.check.portability import ARCHS, WorkerStartError, check_portability, default_jobs
from triton_kda.check.runner import Backend, Row, available_backends, check_config, failed_rows
from triton_kda.check.table import build_table, compare_with_fla, exit_code, render, worse_than_fla, write_outputs
from triton_kda.specs import compile_specs

__all__ = ["build_parser", "default_archs", "main", "parse_archs", "parse_jobs", "portability_main", "report",
           "run_grid"]

USAGE_ERROR = 2
INTERRUPTED = 130
DEFAULT_ARCHS = (89, 90)  # without a CUDA GPU (or on one outside ARCHS): the two CI compiles
_ARCH_HELP = ("compute capabilities, comma-separated, among " + ",".join(map(str, ARCHS))
              + " (default: the CUDA GPU's; without one " + ",".join(map(str, DEFAULT_ARCHS)) + ")")
_ALL_HELP = "all of " + ",".join(map(str, ARCHS)) + " (about 30 minutes on 2 cores)"
_JOBS_HELP = "compile in N worker processes (default: the CPU count, here {}); 1 compiles in this process"
_CHECK_ONLY = ("quick", "full", "fwd_only", "filter", "baseline", "save_baseline", "list", "no_fla", "fla_all")


def parse_archs(text: str) -> tuple[int, ...]:
    """"89,90" -> (89, 90); every entry must be a supported compute capability (ARCHS)."""
    try:
        archs = tuple(int(a) for a in text.split(",") if a.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated compute capabilities like 89,90, got {text!r}") from None
    bad = [a for a in archs if a not in ARCHS]
    if not archs or bad:
        raise argparse.ArgumentTypeError(f"architectures must be among {','.join(map(str, ARCHS))}, got {text!r}")
    return archs


def default_archs() -> tuple[int, ...]:
    """What `kda-portability` compiles for without --arch/--all: the CUDA GPU's compute capability when it is among
    ARCHS, else DEFAULT_ARCHS. Asks the driver, so call it when the command runs, not at import."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        if 10 * major + minor in ARCHS:
            return (10 * major + minor,)
    return DEFAULT_ARCHS


def parse_jobs(text: str) -> int:
    """"4" -> 4: the number of portability worker processes, a positive integer."""
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of worker processes, got {text!r}")
    return jobs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kda-check",
        description="Check every available chunk_kda backend against the fp64 oracle (forward and backward), "
        "or with --portability compile every kernel configuration for the GPU's architecture (--all: sm_80..sm_120).",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny grid for the CPU interpreter (default without CUDA)")
    size.add_argument("--full", action="store_true", help="GPU-sized grid (default with CUDA)")
    p.add_argument("--fwd-only", action="store_true", help="skip the backward checks")
    p.add_argument("--filter", metavar="SUBSTR", help="only configurations whose id contains SUBSTR")
    p.add_argument("--list", action="store_true", help="print the selected configuration ids and exit")
    fla = p.add_mutually_exclusive_group()
    fla.add_argument("--no-fla", action="store_true",
                     help="leave out the informational fla rows (fla autotunes for minutes on every new shape)")
    fla.add_argument("--fla-all", action="store_true",
                     help="run fla on every configuration (default: only the bf16 ones with Kimi Linear's flags)")
    p.add_argument("--out", metavar="DIR", type=Path, help="also write the table as DIR/<tool>.csv and .json")
    p.add_argument("--save-baseline", metavar="FILE", type=Path, help="store this run's errors in FILE")
    p.add_argument("--baseline", metavar="FILE", type=Path,
                   help="fail rows whose errors grew more than 2x over FILE (above a small absolute floor)")
    p.add_argument("--portability", action="store_true",
                   help="compile every kernel configuration ahead of time instead (same as kda-portability)")
    archs = p.add_mutually_exclusive_group()
    archs.add_argument("--arch", type=parse_archs, metavar="LIST", help=f"with --portability: {_ARCH_HELP}")
    archs.add_argument("--all", action="store_true", help=f"with --portability: {_ALL_HELP}")
    p.add_argument("--jobs", type=parse_jobs, metavar="N",
                   help="worker processes: with --portability " + _JOBS_HELP.format(default_jobs()) + "; else "
                   f"configurations checked at once on the GPU (default {_gpu_jobs()}: first calls compile for "
                   "seconds to minutes, on the CPU) or through the interpreter (default 1)")
    return p


def _interpreting() -> bool:
    return bool(triton.knobs.runtime.interpret)


def _rerun(argv: list[str], interpret: bool) -> int:
    """Run `kda-check argv` in a child process with the Triton interpreter on or off; return its exit code.
    The child finds this package where this process found it (installed or a source checkout)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    try:
        return subprocess.run([sys.executable, "-m", "triton_kda.check.cli", *argv], env=env).returncode
    except KeyboardInterrupt:  # Ctrl-C reached the child too (same process group)
        return INTERRUPTED


def _gpu_jobs() -> int:
    return min(8, default_jobs())


def _timed_check(config: CheckConfig, backends: list[Backend], device: torch.device,
                 backward: bool) -> tuple[list[Row], float]:
    start = time.perf_counter()
    rows = check_config(config, backends, device, backward=backward)
    return rows, time.perf_counter() - start


def _lost(config: CheckConfig, backends: list[Backend], error: BaseException) -> list[Row]:
    """Failed rows for a config whose worker process died (a crash poisons a CUDA context, so it is reported, not
    retried)."""
    reason = f"worker process failed: {type(error).__name__}: {str(error).strip()[:200]}"
    return [row for b in backends for row in failed_rows(config, b, ["o"], reason)]


def run_grid(configs: list[CheckConfig], backends: list[Backend], device: torch.device, *, backward: bool,
             progress: bool | None = None, jobs: int = 1) -> list[Row]:
    """Rows of every config on every backend (see runner.check_config), in the order of `configs`.

    `jobs` > 1 checks that many configs at once in spawned worker processes (the first call of each config compiles
    its kernels on the CPU, which dominates a fresh GPU run); `backends` must then be picklable. `progress`: tqdm
    bar (None: on a tty; elsewhere, e.g. a log file, one line per config on stderr with its seconds and failed-row
    count)."""
    bar = sys.stderr.isatty() if progress is None else progress
    lines = progress is None and not bar
    done: dict[str, list[Row]] = {}

    def finished(config: CheckConfig, rows: list[Row], seconds: float) -> None:
        done[config.id] = rows
        if lines:
            failed = sum(not (r.passed or r.informational) for r in rows)
            print(f"kda-check [{len(done)}/{len(configs)}] {config.id}: {seconds:.1f} s, {failed} failed",
                  file=sys.stderr, flush=True)

    with tqdm(total=len(configs), desc="kda-check", unit="config", disable=not bar) as tq:
        if jobs <= 1:
            for config in configs:
                finished(config, *_timed_check(config, backends, device, backward))
                tq.update()
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                futures = {pool.submit(_timed_check, c, backends, device, backward): c for c in configs}
                for future in as_completed(futures):
                    config = futures[future]
                    try:
                        finished(config, *future.result())
                    except Exception as e:  # a worker that died: its configs fail, the run goes on
                        finished(config, _lost(config, backends, e), math.nan)
                    tq.update()
    return [row for config in configs for row in done[config.id]]


def report(rows: list, *, stem: str = "kda-check", out: Path | None = None, baseline: pd.DataFrame | None = None,
           save_to: Path | None = None, meta: dict | None = None) -> int:
    """Print the table of `rows` (with fla's error beside ours where fla ran, and compared with `baseline` rows when
    given), write `out`/<stem>.csv/.json and the
    baseline file `save_to` when given, and return the exit code (0 pass, 1 fail)."""
    df = compare_with_fla(build_table(rows))
    if baseline is not None:
        df = compare_baseline(df, baseline)
    print(render(df))
    worse = worse_than_fla(df)
    if len(worse):
        print("less exact than fla on the same inputs: " + ", ".join(
            f"{r.config} {r.backend} {r.tensor} ({r.vs_fla.split()[0]}x)" for r in worse.itertuples()))
    if baseline is not None and df["regressed"].any():
        print("regressed against the baseline: " + ", ".join(
            f"{r.config} {r.backend} {r.tensor}" for r in df[df["regressed"]].itertuples()))
    if out is not None:
        print("wrote " + ", ".join(map(str, write_outputs(df, out, stem))))
    if save_to is not None:
        save_baseline(df, save_to, meta)
        print(f"saved baseline {save_to}")
    return exit_code(df)


def _select(args: argparse.Namespace, cuda: bool) -> list[CheckConfig]:
    full = args.full or (cuda and not args.quick)
    configs = full_grid(("fp32", "fp16", "bf16") if cuda else ("fp32", "fp16")) if full else quick_grid()
    if args.filter:
        configs = [c for c in configs if args.filter in c.id]
    return configs


def main(argv: list[str] | None = None) -> int:
    """`kda-check`: see `kda-check --help`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.portability:
        given = [f"--{n.replace('_', '-')}" for n in _CHECK_ONLY if getattr(args, n)]
        if given:
            parser.error(f"{', '.join(given)} cannot be combined with --portability")
        return _portability(args, argv)
    if args.arch is not None or args.all:
        parser.error(f"{'--arch' if args.arch is not None else '--all'} applies to --portability only")

    cuda = torch.cuda.is_available()
    configs = _select(args, cuda)
    if not configs:
        print(f"kda-check: no configuration id contains {args.filter!r} (see --list)", file=sys.stderr)
        return USAGE_ERROR
    if args.list:
        print("\n".join(c.id for c in configs))
        return 0
    if _interpreting() != (not cuda):
        return _rerun(argv, interpret=not cuda)
    try:
        baseline = load_baseline(args.baseline) if args.baseline is not None else None
    except (OSError, ValueError) as e:
        print(f"kda-check: cannot read --baseline: {e}", file=sys.stderr)
        return USAGE_ERROR

    device = torch.device("cuda" if cuda else "cpu")
    backends = available_backends(device, fla=not args.no_fla, fla_all=args.fla_all)
    where = torch.cuda.get_device_name(device) if cuda else "CPU (Triton interpreter)"
    print(f"kda-check: {len(configs)} configurations x {'forward' if args.fwd_only else 'forward+backward'} on "
          f"{where}, backends: {', '.join(b.name for b in backends)}")
    jobs = min(args.jobs or (_gpu_jobs() if cuda else 1), len(configs))
    rows = run_grid(configs, backends, device, backward=not args.fwd_only, jobs=jobs)
    meta = {"device": where, "torch": torch.__version__, "triton": triton.__version__, "fwd_only": args.fwd_only}
    return report(rows, out=args.out, baseline=baseline, save_to=args.save_baseline, meta=meta)


def _portability(args: argparse.Namespace, argv: list[str]) -> int:
    if _interpreting():
        return _rerun(argv, interpret=False)
    archs = ARCHS if args.all else args.arch or default_archs()
    jobs = args.jobs or default_jobs()
    print(f"kda-portability: compiling for {', '.join(f'sm_{a}' for a in archs)} in "
          f"{'this process' if jobs == 1 else f'{jobs} worker processes'}", flush=True)
    rows = []
    try:
        for i, arch in enumerate(archs, 1):  # one call per arch, so that a log shows how far it got
            start = time.perf_counter()
            print(f"kda-portability [{i}/{len(archs)}] sm_{arch}: compiling", file=sys.stderr, flush=True)
            arch_rows = check_portability(compile_specs, (arch,), jobs=jobs)
            failed = sum(not r.passed for r in arch_rows)
            print(f"kda-portability [{i}/{len(archs)}] sm_{arch}: {len(arch_rows)} configurations, {failed} failed, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
            rows += arch_rows
    except KeyboardInterrupt:
        print("kda-portability: interrupted; no table written", file=sys.stderr)
        return INTERRUPTED
    except WorkerStartError as e:
        print(f"kda-portability: {e}", file=sys.stderr)
        return 1
    if not rows:
        print("kda-portability: compile_specs listed no kernel configuration", file=sys.stderr)
        return USAGE_ERROR
    return report(rows, stem="kda-portability", out=args.out)


def portability_main(argv: list[str] | None = None) -> int:
    """`kda-portability [--arch 89,90 | --all] [--jobs N] [--out DIR]`: same as `kda-check --portability`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="kda-portability", description=(
        "Compile every kernel launch configuration the dispatcher can pick, for each architecture, and check "
        "shared memory against its limit; report registers and spills from ptxas."))
    archs = parser.add_mutually_exclusive_group()
    archs.add_argument("--arch", type=parse_archs, metavar="LIST", help=_ARCH_HELP)
    archs.add_argument("--all", action="store_true", help=_ALL_HELP)
    parser.add_argument("--jobs", type=parse_jobs, metavar="N", help=_JOBS_HELP.format(default_jobs()))
    parser.add_argument("--out", metavar="DIR", type=Path, help="also write DIR/kda-portability.csv and .json")
    parser.parse_args(argv)
    return main(["--portability", *argv])


if __name__ == "__main__":
    sys.exit(main())
