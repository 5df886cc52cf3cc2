"""kda-portability on toy kernels: ahead-of-time compiles for sm_89 and sm_90 without a GPU, the report's fields,
the shared-memory limit, compile failures, a missing ptxas, repeated kernels and the worker processes (order, a dead
worker, one that cannot start, an interrupt). Then the CI gate: every real configuration for sm_89 and sm_90.

The toy kernels are wrapped in `JITFunction` directly rather than decorated with `triton.jit`: conftest turns the
interpreter on for CPU-only machines, and an interpreted function cannot be compiled."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from triton_kda.check import portability
from triton_kda.check.cli import report
from triton_kda.check.portability import (
    SMEM_LIMITS,
    PortabilityRow,
    PtxasUnavailable,
    WorkerStartError,
    check_portability,
    check_spec,
    parse_ptxas_log,
    ptxas_usage,
)
from triton_kda.check.table import build_table, exit_code
from triton_kda.configs import CompileSpec
from triton_kda.specs import compile_specs

ROOT = Path(__file__).resolve().parents[1]


def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def _square_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    """y = x @ x for one [BLOCK, BLOCK] fp32 tile (tf32 MMA): both operands staged in shared memory, 8 * BLOCK^2 B."""
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(y_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(x, x))


# Triton 3.7.1's interpreter leaves triton.language patched after an interpreted kernel calls a @triton.jit helper
# (tl.sum, tl.max, ... from triton.language.standard): every later compile in that process fails, which is what a
# pytest worker that ran interpreter tests first would see. Test modules are imported before any test runs, so this
# snapshot holds the unpatched language; the fixture puts back what the interpreter replaced and drops the functions
# it added, for the compiles these tests make in this process.
_LANGUAGE = {obj: dict(vars(obj)) for obj in (tl, tl.core, tl.math, tl.tensor, tl.dtype,
                                              tl.core.tensor_descriptor_base)}


@pytest.fixture(autouse=True)
def _unpatched_triton_language():
    for obj, pristine in _LANGUAGE.items():
        now = dict(vars(obj))
        for name, value in now.items():
            if name not in pristine and callable(value):
                delattr(obj, name)
        for name, value in pristine.items():
            if now.get(name) is not value:
                setattr(obj, name, value)


SCALE = CompileSpec("scale BLOCK256", JITFunction(_scale_kernel),
                    {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}, 4, 2)
# about 131072 B of shared memory: above the sm_86/89/120 limit (101376 B), below sm_80 and sm_90
SQUARE = CompileSpec("square BLOCK128", JITFunction(_square_kernel),
                     {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128}, 4, 1)


@pytest.mark.parametrize("arch", [89, 90], ids=["sm89", "sm90"])
def test_toy_spec_report(arch):
    row = check_spec(SCALE, arch)
    assert (row.kernel, row.arch, row.num_warps, row.num_stages) == ("scale BLOCK256", arch, 4, 2)
    assert row.smem_limit == SMEM_LIMITS[arch]
    assert isinstance(row.shared, int) and 0 <= row.shared <= row.smem_limit
    assert isinstance(row.registers, int) and 0 < row.registers <= 255, row.note
    assert (row.spill_stores, row.spill_loads) == (0, 0)
    assert row.passed and row.reason == "" and row.note == ""


def test_over_the_shared_memory_limit_fails():
    rows = check_portability(lambda arch: [SCALE, SQUARE], [89, 90])
    by = {(r.kernel, r.arch): r for r in rows}
    assert len(rows) == 4
    over = by["square BLOCK128", 89]
    assert over.shared > SMEM_LIMITS[89] and not over.passed
    assert over.reason == f"shared memory {over.shared} B exceeds the sm_89 limit 101376 B"
    assert by["square BLOCK128", 90].passed and SMEM_LIMITS[89] < by["square BLOCK128", 90].shared <= SMEM_LIMITS[90]
    assert by["scale BLOCK256", 89].passed
    assert exit_code(build_table(rows)) == 1
    assert report(rows, stem="kda-portability") == 1
    assert report([r for r in rows if r.passed], stem="kda-portability") == 0


def test_patched_language_is_a_clear_failed_row(monkeypatch):
    monkeypatch.setattr(tl.core, "program_id", lambda *args, **kwargs: None)
    row = check_spec(SCALE, 89)
    assert not row.passed
    assert row.reason.startswith("compile failed: RuntimeError: triton.language is still patched by Triton's")


def test_compile_failure_is_a_failed_row():
    broken = SCALE._replace(name="missing arg", signature={"x_ptr": "*fp32", "BLOCK": "constexpr"})
    row = check_spec(broken, 90)
    assert not row.passed and row.reason.startswith("compile failed: ")
    assert row.shared is None and row.registers is None


def test_interpreted_kernel_is_a_failed_row():
    row = check_spec(SCALE._replace(fn=InterpretedFunction(_scale_kernel)), 90)
    assert not row.passed and "TRITON_INTERPRET" in row.reason


def test_registers_come_from_tritons_own_ptxas_log(monkeypatch):
    def no_second_run(ptx, arch):
        raise AssertionError("check_spec assembled the PTX again")

    monkeypatch.setattr(portability, "ptxas_usage", no_second_run)
    row = check_spec(SCALE, 90)
    assert row.passed and isinstance(row.registers, int) and row.note == ""


def test_compiles_leave_no_files_in_tritons_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert check_spec(SCALE, 90).passed
    assert list(tmp_path.iterdir()) == []


def _compile_without_log(monkeypatch):
    """Make check_spec see a Triton that does not hand over its ptxas log."""
    compile_ = portability._compile
    monkeypatch.setattr(portability, "_compile", lambda spec, arch: (compile_(spec, arch)[0], None))


def test_without_tritons_log_a_separate_ptxas_run_reports(monkeypatch):
    _compile_without_log(monkeypatch)
    row = check_spec(SCALE, 89)
    assert row.passed and isinstance(row.registers, int) and (row.spill_stores, row.spill_loads) == (0, 0)
    assert row.note == "registers/spills from a separate ptxas -v run"


def test_missing_ptxas_leaves_columns_empty_with_a_note(monkeypatch):
    _compile_without_log(monkeypatch)
    monkeypatch.setattr(portability, "_ptxas_binaries", lambda arch: [])
    row = check_spec(SCALE, 89)
    assert row.passed and row.shared is not None
    assert (row.registers, row.spill_stores, row.spill_loads) == (None, None, None)
    assert row.note == "registers/spills unavailable: no ptxas under triton/backends/nvidia/bin"


def test_ptxas_rejecting_the_ptx_raises_unavailable():
    with pytest.raises(PtxasUnavailable, match="sm_90a"):
        ptxas_usage(".version 8.0\n.target sm_90a\nthis is not ptx\n", 90)


def test_listing_error_is_a_failed_row():
    def specs(arch):
        if arch == 90:
            raise KeyError("no launch table for sm_90")
        return [SCALE]

    rows = check_portability(specs, [89, 90])
    expected = [("scale BLOCK256", 89, True), ("<compile_specs>", 90, False)]
    assert [(r.kernel, r.arch, r.passed) for r in rows] == expected
    assert rows[1].reason == "listing specs raised KeyError: 'no launch table for sm_90'"


def test_the_same_kernel_under_two_names_compiles_once(monkeypatch):
    compiled = []

    def fake_check_spec(spec, arch):
        compiled.append((spec.name, arch))
        return PortabilityRow(spec.name, arch, spec.num_warps, spec.num_stages, 1024, SMEM_LIMITS[arch], 32, 0, 0,
                              True, note="from ptxas")

    monkeypatch.setattr(portability, "check_spec", fake_check_spec)
    specs = [SCALE, SCALE._replace(name="twin", constexprs={"BLOCK": 256}),  # an equal dict: the same kernel
             SCALE._replace(name="other stages", num_stages=3),
             SCALE._replace(name="unhashable", constexprs={"BLOCK": 256, "TILES": [1, 2]}),
             SCALE._replace(name="unhashable twin", constexprs={"BLOCK": 256, "TILES": [1, 2]})]
    rows = check_portability(lambda arch: specs, [89, 90])
    compiled_names = ["scale BLOCK256", "other stages", "unhashable", "unhashable twin"]
    assert compiled == [(name, arch) for arch in (89, 90) for name in compiled_names]
    assert [(r.kernel, r.arch) for r in rows] == [(spec.name, arch) for arch in (89, 90) for spec in specs]
    assert rows[1] == replace(rows[0], kernel="twin", note="same compile as 'scale BLOCK256'; from ptxas")
    assert rows[6] == replace(rows[5], kernel="twin", note="same compile as 'scale BLOCK256'; from ptxas")


def test_unknown_arch_is_rejected():
    with pytest.raises(ValueError, match="`archs`"):
        check_portability(lambda arch: [SCALE], [75])
    with pytest.raises(ValueError, match="`arch`"):
        check_spec(SCALE, 75)


def test_parse_ptxas_log():
    log = (
        "ptxas info    : Compiling entry function '_k' for 'sm_90a'\n"
        "ptxas info    : Function properties for _k\n"
        "    8 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers\n"
    )
    assert parse_ptxas_log(log) == portability.PtxasUsage(168, 16, 24)
    with pytest.raises(ValueError, match="no register/spill report"):
        parse_ptxas_log("ptxas fatal   : Unsupported .version 9.1")


def test_ptxas_binaries_are_bundled():
    binaries = portability._ptxas_binaries(90)
    assert binaries and binaries[0].name == "ptxas", binaries
    assert all(p.is_relative_to(Path(triton.__file__).parent) for p in binaries)


# ---------------------------------------------------------------- worker processes (jobs > 1)
# Spawned workers unpickle the specs function by reference: these must be module-level.

def _specs_but_none_for_sm120(arch):
    if arch == 120:
        raise KeyError("no launch table for sm_120")
    return [SCALE._replace(name=f"scale BLOCK{b}", constexprs={"BLOCK": b}) for b in (256, 64, 128)]


def _specs_troubled_in_workers(arch):
    """One SCALE per arch; in a worker process, listing sm_90 kills the worker and sm_86 lists another name."""
    if multiprocessing.parent_process() is not None:
        if arch == 90:
            os.kill(os.getpid(), signal.SIGKILL)
        if arch == 86:
            return [SCALE._replace(name="renamed")]
    return [SCALE]


class _ExitsWhenUnpickled:
    """Lists one spec here; a worker process that unpickles it exits with code 5 before it can take a job."""

    def __call__(self, arch):
        return [SCALE]

    def __reduce__(self):
        return (os._exit, (5,))


def test_workers_give_the_serial_rows_in_the_serial_order():
    archs = [90, 120, 89]
    serial = check_portability(_specs_but_none_for_sm120, archs, jobs=1)
    expected = [(s.name, 90) for s in _specs_but_none_for_sm120(90)] + [("<compile_specs>", 120)] + [
        (s.name, 89) for s in _specs_but_none_for_sm120(89)]
    assert [(r.kernel, r.arch) for r in serial] == expected
    assert check_portability(_specs_but_none_for_sm120, archs, jobs=2) == serial


def test_a_dead_worker_fails_its_row_and_is_replaced():
    rows = check_portability(_specs_troubled_in_workers, [90, 89, 86, 80], jobs=2)
    by_arch = {r.arch: r for r in rows}
    assert [r.arch for r in rows] == [90, 89, 86, 80]
    assert not by_arch[90].passed and by_arch[90].reason == "the worker process compiling it died (killed by SIGKILL)"
    assert (by_arch[90].kernel, by_arch[90].num_warps) == ("scale BLOCK256", 4)
    assert not by_arch[86].passed
    assert by_arch[86].reason == "the worker process listed a different spec at index 0: 'renamed'"
    assert by_arch[89].passed and by_arch[80].passed
    assert multiprocessing.active_children() == []


def test_a_worker_that_cannot_start_is_a_clear_error():
    with pytest.raises(WorkerStartError, match=r"exited \(exit code 5\) before it could take a job"):
        check_portability(_ExitsWhenUnpickled(), [89, 90], jobs=2)
    assert multiprocessing.active_children() == []


def test_interrupt_ends_the_workers(monkeypatch):
    def interrupted(objects):
        raise KeyboardInterrupt

    monkeypatch.setattr(portability, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        check_portability(_specs_but_none_for_sm120, [89, 90], jobs=2)
    assert multiprocessing.active_children() == []


def test_jobs_need_a_picklable_specs_function():
    with pytest.raises(TypeError, match="must be picklable"):
        check_portability(lambda arch: [SCALE], [89, 90], jobs=2)


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2"], ids=repr)
def test_bad_jobs_are_rejected(jobs):
    with pytest.raises(ValueError, match="`jobs`"):
        check_portability(_specs_but_none_for_sm120, [89], jobs=jobs)


def test_one_compile_runs_in_this_process_whatever_jobs_says():
    """One spec in all: no worker is started (a lambda would not pickle)."""
    rows = check_portability(lambda arch: [SCALE], [89], jobs=4)
    assert [(r.kernel, r.passed) for r in rows] == [("scale BLOCK256", True)]


# ---------------------------------------------------------------- the CI gate: every real configuration

_CI_ARCHS = (89, 90)
_HANG_GUARD_S = 60 * 60  # not a speed check: CI's own cap is 90 minutes; this run takes minutes


@pytest.mark.slow
def test_every_kernel_configuration_fits_sm89_and_sm90(tmp_path):
    """The portability CI gate: `kda-check --portability --arch 89,90` compiles every entry of compile_specs for both
    architectures in a child process (TRITON_INTERPRET unset, worker processes on every CPU) and passes: each entry
    has its row, within the shared-memory limit, with registers from ptxas. Several minutes on 2 cores; conftest
    schedules it first so that pytest-xdist overlaps it with the rest of the suite."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "triton_kda.check.cli", "--portability", "--arch", ",".join(map(str, _CI_ARCHS)),
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=_HANG_GUARD_S)
    tail = (proc.stdout[-4000:] + "\n" + proc.stderr[-4000:]).strip()
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}"
    rows = json.loads((out / "kda-portability.json").read_text())
    assert sorted((r["kernel"], r["arch"]) for r in rows) == sorted(
        (spec.name, arch) for arch in _CI_ARCHS for spec in compile_specs(arch))
    bad = [r for r in rows if not r["passed"] or r["registers"] is None]
    assert not bad, f"{len(bad)} rows failed or lack registers, e.g. {bad[:3]}"
    assert f"{len(rows)} rows: 0 failing the run" in proc.stdout


@pytest.mark.parametrize("arch", [80, 90, 120])
def test_kda_compile_specs_list_every_runtime_argument(arch):
    """Every KDA entry of compile_specs names each runtime argument of its kernel and gives each constexpr a value,
    so a kernel that gains an argument cannot drop out of kda-portability's compile check unnoticed."""
    import inspect

    for spec in compile_specs(arch):
        if spec.name.startswith("fmha"):
            continue
        params = inspect.signature(getattr(spec.fn, "fn", spec.fn)).parameters
        runtime = {n for n, p in params.items() if "constexpr" not in str(p.annotation)}
        assert set(spec.signature) == runtime, spec.name
        assert set(spec.constexprs) == set(params) - runtime, spec.name
