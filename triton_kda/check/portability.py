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
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import triton
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
    "check_portability",
    "check_spec",
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


def _compile(spec: CompileSpecLike, arch: int) -> tuple[Any, str | None]:
    """Compile `spec` for `arch`. Also returns the `ptxas -v` log of Triton's own assembly of the kernel (the
    registers and spills of the cubin Triton builds), or None when this Triton has no `knobs.nvidia.dump_ptxas_log`.
    The compile bypasses Triton's cache, since a cached kernel would skip ptxas and leave no log."""
    if not isinstance(spec.fn, JITFunction):
        raise TypeError(
            f"spec {spec.name!r}: `fn` must be a triton.jit function, got {type(spec.fn).__name__} "
            "(kernels defined with TRITON_INTERPRET=1 cannot be compiled; unset it)"
        )
    src = ASTSource(spec.fn, dict(spec.signature), dict(spec.constexprs))
    target = GPUTarget("cuda", arch, 32)
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    knobs = getattr(triton, "knobs", None)
    if knobs is None or not hasattr(knobs.nvidia, "dump_ptxas_log"):
        return triton.compile(src, target=target, options=options), None
    log = io.StringIO()
    with knobs.compilation.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(log):
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


def check_portability(specs_for_arch: Callable[[int], Iterable[CompileSpecLike]], archs: Iterable[int],
                      progress: bool | None = None) -> list[PortabilityRow]:
    """One row per (spec, arch) for every spec `specs_for_arch(arch)` lists (e.g. `triton_kda.configs.compile_specs`).
    If listing the specs of an arch raises, that arch gets one failed row naming the error. `progress`: tqdm bar
    (None: only on a terminal)."""
    archs = list(archs)
    unknown = [a for a in archs if a not in SMEM_LIMITS]
    if unknown:
        raise ValueError(f"check_portability: `archs` must be among {ARCHS}, got {unknown}")
    jobs: list[tuple[CompileSpecLike, int] | PortabilityRow] = []
    for arch in archs:
        try:
            jobs += [(spec, arch) for spec in specs_for_arch(arch)]
        except Exception as e:  # a broken launch table is reported, not raised
            jobs.append(PortabilityRow(
                kernel="<compile_specs>", arch=arch, num_warps=0, num_stages=0, shared=None,
                smem_limit=SMEM_LIMITS[arch], registers=None, spill_stores=None, spill_loads=None, passed=False,
                reason=f"listing specs raised {type(e).__name__}: {e}"))
    disable = None if progress is None else not progress
    return [
        job if isinstance(job, PortabilityRow) else check_spec(*job)
        for job in tqdm(jobs, desc="kda-portability", unit="kernel", disable=disable)
    ]
