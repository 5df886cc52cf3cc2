"""Ahead-of-time compiles of every kernel launch configuration for every supported NVIDIA architecture.

No GPU is needed: `triton.compile` targets any compute capability, and the `ptxas -v` log of Triton's own assembly
of the kernel gives registers and spills. A configuration fails when it does not compile or when its shared memory
(`metadata.shared`) exceeds the architecture's per-block limit; Triton itself does not check that limit without a
device.

Kernels must be real `triton.jit` functions: define them with TRITON_INTERPRET unset (the CLI makes sure of it).
"""
from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol

import triton
import triton.language as tl
from tqdm import tqdm
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

__all__ = [
    "ARCHS",
    "SMEM_LIMITS",
    "PortabilityRow",
    "PtxasUnavailable",
    "PtxasUsage",
    "WorkerStartError",
    "check_portability",
    "check_spec",
    "default_jobs",
    "parse_ptxas_log",
    "ptxas_usage",
]

# per-block shared-memory limit in bytes (opt-in maximum) by compute capability
SMEM_LIMITS = {80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448, 120: 101376}
ARCHS = tuple(SMEM_LIMITS)
_PTXAS_TIMEOUT_S = 120


class CompileSpecLike(Protocol):
    """What `check_spec` reads from a spec (`triton_kda.configs.CompileSpec` has these fields)."""

    name: str
    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, object]
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class PtxasUsage:
    """Per-thread registers and bytes of local-memory spill stores/loads of one compiled kernel."""

    registers: int
    spill_stores: int
    spill_loads: int


class PtxasUnavailable(RuntimeError):
    """No bundled ptxas could assemble the PTX for this architecture (the message says why)."""


class WorkerStartError(RuntimeError):
    """A worker process of `check_portability(..., jobs > 1)` exited before it could take a job."""


@dataclass(frozen=True)
class PortabilityRow:
    """Result for one (kernel configuration, arch). shared and smem_limit in bytes; registers/spill_* are None when
    ptxas could not report them (then `note` says why); `reason` says why a failed row failed."""

    kernel: str
    arch: int
    num_warps: int
    num_stages: int
    shared: int | None
    smem_limit: int
    registers: int | None
    spill_stores: int | None
    spill_loads: int | None
    passed: bool
    reason: str = ""
    note: str = ""


def parse_ptxas_log(log: str) -> PtxasUsage:
    """Read "Used N registers" and "N bytes spill stores/loads" from `ptxas -v` output (first kernel in the log)."""
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    loads = re.search(r"(\d+) bytes spill loads", log)
    if regs is None or stores is None or loads is None:
        raise ValueError(f"parse_ptxas_log: no register/spill report in ptxas output: {log.strip()[:300]!r}")
    return PtxasUsage(int(regs.group(1)), int(stores.group(1)), int(loads.group(1)))


def _ptxas_binaries(arch: int) -> list[Path]:
    """Triton's bundled ptxas executables that exist, the one Triton itself uses for `arch` first."""
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    names = ["ptxas-blackwell", "ptxas"] if arch >= 100 else ["ptxas", "ptxas-blackwell"]
    return [bin_dir / n for n in names if (bin_dir / n).is_file()]


def ptxas_usage(ptx: str, arch: int) -> PtxasUsage:
    """Assemble `ptx` with `ptxas -v` for the GPU its `.target` line names (e.g. sm_90a) and return the usage.
    Raises PtxasUnavailable when no bundled ptxas accepts it (e.g. too old for the PTX version or the arch)."""
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, flags=re.MULTILINE)
    gpu_name = target.group(1) if target else f"sm_{arch}"
    binaries = _ptxas_binaries(arch)
    if not binaries:
        raise PtxasUnavailable("no ptxas under triton/backends/nvidia/bin")
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        for exe in binaries:
            cmd = [str(exe), "-v", f"--gpu-name={gpu_name}", str(src), "-o", str(Path(tmp) / "kernel.cubin")]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PTXAS_TIMEOUT_S)
            if proc.returncode == 0:
                return parse_ptxas_log(proc.stderr + proc.stdout)
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            errors.append(f"{exe.name}: {lines[-1] if lines else f'exit code {proc.returncode}'}")
    raise PtxasUnavailable(f"{gpu_name}: " + "; ".join(errors))


def _language_patched() -> bool:
    """True when Triton's interpreter left its stand-ins for the language builtins in place (triton 3.7.1 undoes the
    patch of a launched kernel, not the one `InterpretedFunction.__call__` makes for each helper call)."""
    return not all(tl.core.is_builtin(module.program_id) for module in (tl, tl.core))


def _compile(spec: CompileSpecLike, arch: int) -> tuple[Any, str | None]:
    """Compile `spec` for `arch`. Also returns the `ptxas -v` log of Triton's own assembly of the kernel (the
    registers and spills of the cubin Triton builds), or None when this Triton has no `knobs.nvidia.dump_ptxas_log`.
    The compile bypasses Triton's cache (a cached kernel would skip ptxas and leave no log) and writes its files to a
    temporary cache directory that is removed afterwards (about 1.3 MB a kernel, which would fill ~/.triton)."""
    if not isinstance(spec.fn, JITFunction):
        raise TypeError(
            f"spec {spec.name!r}: `fn` must be a triton.jit function, got {type(spec.fn).__name__} "
            "(kernels defined with TRITON_INTERPRET=1 cannot be compiled; unset it)"
        )
    if _language_patched():
        raise RuntimeError(
            "triton.language is still patched by Triton's interpreter in this process (an interpreted kernel called "
            "a @triton.jit helper such as tl.sum, and Triton does not undo that patch), so nothing compiles here; "
            "compile in a process that ran no interpreted kernel (jobs > 1 compiles in fresh worker processes)")
    src = ASTSource(spec.fn, dict(spec.signature), dict(spec.constexprs))
    target = GPUTarget("cuda", arch, 32)
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    knobs = getattr(triton, "knobs", None)
    if knobs is None or not hasattr(knobs.nvidia, "dump_ptxas_log"):
        return triton.compile(src, target=target, options=options), None
    log = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="kda-portability-") as cache_dir, knobs.cache.scope(), \
            knobs.compilation.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        knobs.cache.dir = cache_dir
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True  # Triton prints the log to stdout
        kernel = triton.compile(src, target=target, options=options)
    return kernel, log.getvalue()


def check_spec(spec: CompileSpecLike, arch: int) -> PortabilityRow:
    """Compile `spec` for compute capability `arch` (a key of SMEM_LIMITS) and report shared memory against the
    arch's limit, registers and spills (from Triton's ptxas log; with a Triton too old to hand it over, from a
    separate `ptxas -v` run, which the row's note says). Never raises for a kernel problem: a failed compile is a
    failed row."""
    if arch not in SMEM_LIMITS:
        raise ValueError(f"check_spec: `arch` must be one of {ARCHS}, got {arch!r}")
    limit = SMEM_LIMITS[arch]
    row = dict(kernel=spec.name, arch=arch, num_warps=spec.num_warps, num_stages=spec.num_stages, smem_limit=limit)
    try:
        kernel, log = _compile(spec, arch)
    except Exception as e:  # a kernel that does not compile is a result to report
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return PortabilityRow(**row, shared=None, registers=None, spill_stores=None, spill_loads=None, passed=False,
                              reason=f"compile failed: {type(e).__name__}: {first}")
    shared = int(kernel.metadata.shared)
    try:
        if log is not None:
            usage, note = parse_ptxas_log(log), ""
        else:
            usage, note = ptxas_usage(kernel.asm["ptx"], arch), "registers/spills from a separate ptxas -v run"
    except (PtxasUnavailable, ValueError, subprocess.TimeoutExpired) as e:
        usage, note = None, f"registers/spills unavailable: {e}"
    passed = shared <= limit
    return PortabilityRow(
        **row, shared=shared,
        registers=usage.registers if usage else None,
        spill_stores=usage.spill_stores if usage else None,
        spill_loads=usage.spill_loads if usage else None,
        passed=passed, reason="" if passed else f"shared memory {shared} B exceeds the sm_{arch} limit {limit} B",
        note=note,
    )


def default_jobs() -> int:
    """Worker processes `kda-portability` uses by default: the CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _failed_row(kernel: str, arch: int, reason: str, num_warps: int = 0, num_stages: int = 0) -> PortabilityRow:
    return PortabilityRow(kernel=kernel, arch=arch, num_warps=num_warps, num_stages=num_stages, shared=None,
                          smem_limit=SMEM_LIMITS[arch], registers=None, spill_stores=None, spill_loads=None,
                          passed=False, reason=reason)


def check_portability(specs_for_arch: Callable[[int], Iterable[CompileSpecLike]], archs: Iterable[int],
                      progress: bool | None = None, jobs: int = 1) -> list[PortabilityRow]:
    """One row per (spec, arch) for every spec `specs_for_arch(arch)` lists (e.g. `triton_kda.specs.compile_specs`),
    in the order archs, then specs. If listing the specs of an arch raises, that arch gets one failed row naming the
    error. Specs that are the same kernel under another name are compiled once; their rows say so in `note`.
    `progress`: tqdm bar (None: only on a terminal).

    `jobs` > 1 compiles in that many worker processes (spawned, so `specs_for_arch` must be picklable: a module-level
    function); each worker lists the specs itself and compiles the ones named by (arch, index). A worker that dies
    while compiling (a crash in the compiler, the OOM killer) gives that spec a failed row and is replaced; one that
    exits before taking a job raises WorkerStartError. On KeyboardInterrupt the workers are ended and it propagates.
    """
    archs = list(archs)
    unknown = [a for a in archs if a not in SMEM_LIMITS]
    if unknown:
        raise ValueError(f"check_portability: `archs` must be among {ARCHS}, got {unknown}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"check_portability: `jobs` must be a positive int, got {jobs!r}")
    rows: list[PortabilityRow | None] = []
    todo: list[_Job] = []
    copies: dict[int, list[tuple[int, str]]] = {}  # position of a compiled job -> (position, name) of its twins
    first: dict[tuple, _Job] = {}
    for arch in archs:
        try:
            specs = list(specs_for_arch(arch))
        except Exception as e:  # a broken launch table is reported, not raised
            rows.append(_failed_row("<compile_specs>", arch, f"listing specs raised {type(e).__name__}: {e}"))
            continue
        for index, spec in enumerate(specs):
            job, key = _Job(len(rows), arch, index, spec), _compile_key(spec, arch)
            rows.append(None)
            if key is not None and key in first:
                copies[first[key].position].append((job.position, spec.name))
                continue
            if key is not None:
                first[key] = job
            copies[job.position] = []
            todo.append(job)
    disable = None if progress is None else not progress
    with tqdm(total=len(rows), desc="kda-portability", unit="kernel", disable=disable) as bar:
        bar.update(sum(row is not None for row in rows))

        def done(job: _Job, row: PortabilityRow) -> None:
            rows[job.position] = row
            for position, name in copies[job.position]:
                rows[position] = replace(row, kernel=name, note="; ".join(
                    filter(None, [f"same compile as {row.kernel!r}", row.note])))
            bar.update(1 + len(copies[job.position]))

        if jobs == 1 or len(todo) < 2:
            for job in todo:
                done(job, check_spec(job.spec, job.arch))
        else:
            _check_in_workers(todo, specs_for_arch, min(jobs, len(todo)), done)
    return rows


def _compile_key(spec: CompileSpecLike, arch: int) -> tuple | None:
    """Equal for specs that compile to the same kernel (one function; equal signature, constexprs, warps, stages,
    arch; spec lists repeat dtype-independent kernels under several names), None when a value is unhashable."""
    key = (id(spec.fn), tuple(sorted(spec.signature.items())),
           tuple(sorted((name, type(value).__name__, value) for name, value in spec.constexprs.items())),
           spec.num_warps, spec.num_stages, arch)
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True)
class _Job:
    position: int  # of its row in the result
    arch: int
    index: int  # in specs_for_arch(arch)
    spec: CompileSpecLike


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    started: bool = False  # it sent _READY
    job: _Job | None = None  # the job sent to it
    took_job: bool = False  # it sent _TOOK for that job


_READY, _TOOK = "ready", "took"


def _worker_main(conn: Connection, specs_for_arch: Callable[[int], Iterable[CompileSpecLike]]) -> None:
    """A worker process: say it is ready, then for each (arch, index, name) received say it took it and send its
    row, until it gets None or the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent ends us
    conn.send(_READY)
    listed: dict[int, list[CompileSpecLike]] = {}
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(_TOOK)
        conn.send(_check_listed(specs_for_arch, listed, *job))


def _check_listed(specs_for_arch, listed: dict[int, list[CompileSpecLike]], arch: int, index: int,
                  name: str) -> PortabilityRow:
    """check_spec of entry `index` of `specs_for_arch(arch)` (listed once per arch), which the parent named `name`."""
    try:
        if arch not in listed:
            listed[arch] = list(specs_for_arch(arch))
        spec = listed[arch][index]
    except Exception as e:
        return _failed_row(name, arch, f"listing specs in the worker process raised {type(e).__name__}: {e}")
    if spec.name != name:
        return _failed_row(name, arch, f"the worker process listed a different spec at index {index}: {spec.name!r}")
    return check_spec(spec, arch)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _check_in_workers(todo: list[_Job], specs_for_arch, n_workers: int,
                      done: Callable[[_Job, PortabilityRow], None]) -> None:
    """Check every job of `todo` in up to `n_workers` spawned processes, one job per worker at a time; call `done`
    with each row as it arrives. A job whose worker died before taking it goes back in the queue."""
    try:
        pickle.dumps(specs_for_arch)
    except Exception as e:
        raise TypeError(f"check_portability: with jobs > 1, `specs_for_arch` must be picklable (a module-level "
                        f"function), got {specs_for_arch!r}: {e}") from None
    ctx = multiprocessing.get_context("spawn")
    queue = deque(todo)
    workers: list[_Worker] = []

    def start() -> None:
        parent_end, child_end = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(child_end, specs_for_arch), daemon=True,
                              name="kda-portability-worker")
        process.start()
        child_end.close()
        workers.append(_Worker(process, parent_end))

    def give_job(worker: _Worker) -> None:
        worker.job, worker.took_job = queue.popleft(), False
        with contextlib.suppress(OSError):  # when it is gone, its sentinel says so
            worker.conn.send((worker.job.arch, worker.job.index, worker.job.spec.name))

    def receive(worker: _Worker) -> bool:
        """Handle one message of `worker`; False when there is none because it is gone."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            return False
        if message == _READY:
            worker.started = True
        elif message == _TOOK:
            worker.took_job = True
        else:
            done(worker.job, message)
            worker.job = None
        return True

    def bury(worker: _Worker) -> None:
        worker.process.join()
        how = _exit_text(worker.process.exitcode)
        if not worker.started:
            raise WorkerStartError(f"a kda-portability worker process exited ({how}) before it could take a job; "
                                   "its error is printed above (--jobs 1 compiles in this process)")
        workers.remove(worker)
        worker.conn.close()
        job = worker.job
        if job is not None and worker.took_job:
            done(job, _failed_row(job.spec.name, job.arch, f"the worker process compiling it died ({how})",
                                  job.spec.num_warps, job.spec.num_stages))
        elif job is not None:
            queue.appendleft(job)

    try:
        while queue or any(w.job is not None for w in workers):
            while queue and len(workers) < n_workers:
                start()
            for w in workers:
                if w.job is None and queue:
                    give_job(w)
            ready = wait([w.conn for w in workers] + [w.process.sentinel for w in workers])
            for w in list(workers):
                if w.conn in ready:
                    if not receive(w):
                        bury(w)
                elif w.process.sentinel in ready:
                    bury(w)
        for w in workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in workers:
            w.process.join(timeout=10)
    finally:
        for w in workers:
            if w.process.is_alive():
                w.process.terminate()
                w.process.join()
            w.conn.close()
