"""Side-by-side benchmark of ``chunk_kda``: ours (``triton_kda``) against fla, in one process on one CUDA GPU.

    python -m benchmarks.run --suite standard --impl triton,fla --modes fwd,fwdbwd --flags kimi --out DIR
    python -m benchmarks.run --suite kimi --quick --out DIR          # at most 2 shapes sharing H per suite
    python -m benchmarks.run --cold-start --out DIR                  # process start -> first fwd+bwd, fresh caches
    python -m benchmarks.run --suite gva --tune-cache DIR --out DIR  # keep fla's autotuning between device calls
    python -m benchmarks.run --suite decode --out DIR                # fused_recurrent_kda decode step, state pool

For every (suite, shape, flag set) the inputs are built once (several rotated sets, so the working set exceeds
L2) and every implementation runs on the same tensors:
1. a first forward (wall time printed: compile + autotune), checked against the fp64 oracle on the first sequence
   truncated to 1024 tokens; an implementation that fails is not timed (its rows say why);
2. ``fwd``: forward under ``torch.no_grad()``, timed with ``triton.testing.do_bench`` (median, p20, p80);
3. ``fwdbwd``: forward + ``o.backward(do)`` into q, k, v, g, beta, after a first call (wall time printed) and a
   gradient check against the fp64 oracle on a small case with the same heads.
Rows (JSON lines, one file per run under --out) carry the times, the speedup against fla, the achieved rates of
``benchmarks.model`` against the copy bandwidth and bf16 matmul rate measured in the same run, the peak memory,
the oracle errors and the provenance. ``python -m benchmarks.report`` renders them.
The ``decode`` suite times one serving decode step of ``fused_recurrent_kda`` against fla's instead
(``benchmarks.decode``: rows of kind "decode", also written as ``decode.md`` under --out).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import decode, model, tune_cache
from benchmarks.report import attach_speedups
from benchmarks.suites import (
    DECODE_SLOTS,
    DECODE_SUITES,
    FLAG_SETS,
    SUITES,
    FlagSet,
    Shape,
    resolve_flags,
    resolve_suites,
    select_shapes,
)

IMPLS = ("triton", "fla", "sm90")
DEFAULT_IMPLS = ("triton", "fla")
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# rel RMSE gates against the fp64 oracle: forward output on the slice, and every gradient on the small case
# (gates against gross errors, not precision targets: fp32 leaves room for tf32 dots, fp16 has 3 more mantissa
# bits than bf16)
FWD_TOL = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 5e-3}
BWD_TOL = {"bf16": 3e-2, "fp16": 1.5e-2, "fp32": 1e-2}
SLICE_TOKENS = 1024
GRAD_CHECK_TOKENS = 256
GRAD_NAMES = ("q", "k", "v", "g", "beta")
REPO = Path(__file__).resolve().parents[1]
COLD_START_TAG = "COLD_START_RESULT "
_T_START = time.perf_counter()

Timer = Callable[[Callable[[], object]], tuple[float, float, float]]


def log(message: str) -> None:
    """Print a progress line with the seconds since start, flushed at once."""
    print(f"[{time.perf_counter() - _T_START:7.1f}s] {message}", flush=True)


def csv_choice(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """argparse type: a comma-separated, non-empty subset of ``choices`` (order kept, repeats dropped)."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"got {text!r}; expected a comma-separated subset of {', '.join(choices)}"
            )
        return list(dict.fromkeys(items))

    return parse


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=csv_choice((*SUITES, "all")), default=["standard"],
                        help=f"shape suites, comma-separated: {', '.join(SUITES)}, all (default: standard)")
    parser.add_argument("--impl", type=csv_choice(IMPLS), default=list(DEFAULT_IMPLS),
                        help="implementations, comma-separated (default: triton,fla)")
    parser.add_argument("--modes", type=csv_choice(model.MODES), default=list(model.MODES),
                        help="fwd and/or fwdbwd (default: both)")
    parser.add_argument("--flags", type=csv_choice(tuple(FLAG_SETS)), default=["kimi"],
                        help=f"flag sets, comma-separated: {', '.join(FLAG_SETS)} (default: kimi)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for the JSONL rows")
    parser.add_argument("--quick", action="store_true",
                        help="at most 2 shapes per suite, sharing H (fla tunes once per suite); short timings")
    parser.add_argument("--max-shapes", type=positive_int, default=None, help="at most N shapes per suite")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first input set")
    parser.add_argument("--warmup-ms", type=positive_int, default=None,
                        help="do_bench warm-up in ms (default 100, quick 50)")
    parser.add_argument("--rep-ms", type=positive_int, default=None,
                        help="do_bench repetition in ms (default 500, quick 200)")
    parser.add_argument("--cold-start", action="store_true",
                        help="only measure process start -> first finished fwd+bwd in fresh subprocesses "
                             "(first shape of the first suite, first flag set, fresh Triton cache)")
    parser.add_argument("--cold-start-timeout", type=positive_int, default=480,
                        help="seconds allowed to each cold-start subprocess (default 480; fla's first fwd+bwd "
                             "autotunes for minutes, so time one --impl per device call)")
    parser.add_argument("--cold-start-child", choices=IMPLS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tune-cache", type=Path, default=None,
                        help="folder of saved Triton autotuning results (benchmarks/tune_cache.py): restored before "
                             "the first call, saved after every case; fla then skips the tuning it already did")
    return parser


def require_cuda(prog: str) -> str | None:
    """None when a CUDA GPU is usable, else the message to print before exiting with code 2."""
    if torch.cuda.is_available():
        return None
    return (f"{prog} needs a CUDA GPU, but torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}); nothing was timed. Run it on a machine with an NVIDIA GPU.")


def forced_backend(chunk_kda: Callable, backend: str) -> Callable:
    """``chunk_kda`` with ``TRITON_KDA_BACKEND`` set to ``backend`` for each call ("triton": the Triton path even
    where a compiled backend would take the call; "sm90": the CUDA forward). A call the backend declines raises
    NotImplementedError, so its rows say "unsupported" with the verifier's reason."""
    from cuda_fast import ENV_VAR, BackendDeclined

    def call(**kwargs):
        previous = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = backend
        try:
            return chunk_kda(**kwargs)
        except BackendDeclined as exc:
            raise NotImplementedError(str(exc)) from exc
        finally:
            if previous is None:
                del os.environ[ENV_VAR]
            else:
                os.environ[ENV_VAR] = previous

    return call


def load_impls(names: list[str]) -> dict[str, Callable | str]:
    """Implementation name -> its ``chunk_kda``, or a sentence saying why it cannot be imported. "triton" and
    "sm90" are triton_kda's ``chunk_kda`` with that backend forced."""
    impls: dict[str, Callable | str] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            if name in ("triton", "sm90"):
                from triton_kda import chunk_kda

                chunk_kda = forced_backend(chunk_kda, name)
            else:
                from fla.ops.kda import chunk_kda
        except Exception as exc:  # a missing package or an incompatible install: reported in the rows, not fatal
            impls[name] = f"{name} not importable: {type(exc).__name__}: {exc}"
            log(impls[name])
            continue
        impls[name] = chunk_kda
        log(f"imported {name} chunk_kda in {time.perf_counter() - t0:.1f} s")
    return impls


def package_version(dist: str, module: str) -> str:
    """Installed version of a distribution, else the module's ``__version__``, else "absent"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return getattr(__import__(module), "__version__", "unknown")
    except Exception:
        return "absent"


def git_sha() -> str:
    """$KDA_GIT_SHA when set (a copy of the tree, such as the device's, may carry a stale .git), else HEAD of the
    repository holding this file, else "unknown"."""
    if os.environ.get("KDA_GIT_SHA"):
        return os.environ["KDA_GIT_SHA"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else "unknown"


def provenance(device: torch.device) -> dict:
    """Where and with what the numbers were taken."""
    import triton

    info = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "fla": package_version("fla-core", "fla"), "python": platform.python_version(), "git_sha": git_sha(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, cc=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                    gpu_mem_gib=round(props.total_memory / 2**30, 1),
                    l2_mb=round(getattr(props, "L2_cache_size", 0) / 1e6, 1) or None)
    else:
        info.update(gpu=f"cpu ({platform.machine()})", cc=None, sm_count=None, gpu_mem_gib=None, l2_mb=None)
    return info


def cuda_timer(warmup_ms: int, rep_ms: int) -> Timer:
    """``triton.testing.do_bench`` (L2 flushed before each timed call): returns (median, p20, p80) in ms."""
    from triton.testing import do_bench

    def timer(fn: Callable[[], object]) -> tuple[float, float, float]:
        p50, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8], return_mode="median")
        return float(p50), float(p20), float(p80)

    return timer


def copy_bandwidth_tbps(timer: Timer, device: torch.device) -> float:
    """A 1 GiB device-to-device copy, bytes read + written over the median time, in TB/s."""
    n = 1 << 30
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))[0]
    return 2 * n / (ms * 1e-3) / 1e12


def matmul_tflops(timer: Timer, device: torch.device, m: int = 8192) -> float:
    """An m x m x m bf16 matrix product on random data, in TFLOP/s."""
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    c = torch.empty(m, m, device=device, dtype=torch.bfloat16)
    ms = timer(lambda: torch.matmul(a, b, out=c))[0]
    return 2 * m**3 / (ms * 1e-3) / 1e12


def measure_ceilings(timer: Timer, device: torch.device) -> dict:
    """The machine's ceilings measured now: ``copy_tbps`` and ``matmul_tflops`` (None where it failed)."""
    ceilings = {}
    for key, measure in (("copy_tbps", copy_bandwidth_tbps), ("matmul_tflops", matmul_tflops)):
        try:
            ceilings[key] = measure(timer, device)
        except Exception as exc:  # ceilings are context for the rows; without them the % columns stay empty
            ceilings[key] = None
            log(f"measuring {key} failed: {type(exc).__name__}: {exc}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    log(f"ceilings: copy {fmt(ceilings['copy_tbps'], '.2f')} TB/s, "
        f"bf16 matmul {fmt(ceilings['matmul_tflops'], '.0f')} TFLOP/s")
    return ceilings


def fmt(value, spec: str) -> str:
    """Format a number, or '-' for a missing one."""
    return "-" if value is None else format(value, spec)


def rotation_count(set_bytes: int, l2_bytes: int, mem_budget_bytes: int) -> int:
    """How many input sets to rotate: together at least 3x L2 (2 to 8 sets), within the memory budget (>= 1)."""
    wanted = min(8, max(2, -(-3 * l2_bytes // max(set_bytes, 1))))
    return max(1, min(wanted, mem_budget_bytes // max(set_bytes, 1)))


def make_case_inputs(shape: Shape, flags: FlagSet, *, device: torch.device, seed: int,
                     requires_grad: bool) -> dict:
    """``chunk_kda`` kwargs for ``shape`` and ``flags`` (no initial or final state); with ``requires_grad``,
    q, k, v, g and beta are fresh leaves that require grad."""
    from reference.harness import make_inputs

    kwargs = make_inputs(shape.B, shape.T, shape.H, shape.HV, shape.K, shape.V, dtype=TORCH_DTYPES[shape.dtype],
                         device=device, seqlens=list(shape.seqlens) if shape.varlen else None, seed=seed,
                         **flags.make_kwargs)
    kwargs.update(flags.call_kwargs)
    kwargs["initial_state"] = None
    kwargs["output_final_state"] = False
    for name in GRAD_NAMES:
        kwargs[name] = kwargs[name].detach().requires_grad_(requires_grad)
    return kwargs


def random_like_output(shape: Shape, *, device: torch.device, seed: int) -> torch.Tensor:
    """A seeded random tensor shaped like o, ``[B, T, HV, V]`` in the input dtype (the upstream gradient do)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = torch.randn(shape.B, shape.T, shape.HV, shape.V, generator=gen, device=device, dtype=torch.float32)
    return out.to(TORCH_DTYPES[shape.dtype])


def tensor_bytes(kwargs: dict) -> int:
    """Bytes of the tensors in a kwargs dict."""
    return sum(t.numel() * t.element_size() for t in kwargs.values() if isinstance(t, torch.Tensor))


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


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall(fn: Callable[[], object], device: torch.device) -> tuple[object, float]:
    """(result, seconds) of one synchronized call: for a first call, compile and autotune included."""
    synchronize(device)
    t0 = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - t0


def peak_memory_gib(fn: Callable[[], object], device: torch.device) -> float | None:
    """Peak memory allocated during one call, above what was allocated before it (None off CUDA)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**30


class Case:
    """One (suite, shape, flag set): the rotated input sets, the oracle's references and the row template."""

    def __init__(self, suite: str, shape: Shape, flags: FlagSet, *, device: torch.device, seed: int,
                 modes: list[str], context: dict):
        self.suite, self.shape, self.flags, self.device, self.seed = suite, shape, flags, device, seed
        self.modes, self.context = modes, context
        self.costs = {mode: model.cost(shape, mode) for mode in modes}
        grad = "fwdbwd" in modes
        first = make_case_inputs(shape, flags, device=device, seed=seed, requires_grad=grad)
        set_bytes = tensor_bytes(first) * (2 if grad else 1) + (tensor_bytes({"o": first["v"]}) if grad else 0)
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            n_sets = rotation_count(set_bytes, getattr(props, "L2_cache_size", 50 * 10**6), props.total_memory // 4)
        else:
            n_sets = 2
        self.sets = [first] + [make_case_inputs(shape, flags, device=device, seed=seed + i, requires_grad=grad)
                               for i in range(1, n_sets)]
        self.dos = ([random_like_output(shape, device=device, seed=seed + 1000 + i) for i in range(n_sets)]
                    if grad else [])
        self.set_mb = set_bytes / 1e6
        self.span = first_sequence(shape, SLICE_TOKENS)
        self.ref_o = oracle_output(first, self.span)
        self._grad_case: tuple[dict, torch.Tensor, dict] | None = None

    def grad_case(self) -> tuple[dict, torch.Tensor, dict]:
        """(kwargs, do, oracle gradients) of the small gradient-check case, built on first use."""
        if self._grad_case is None:
            small = small_case(self.shape)
            kwargs = make_case_inputs(small, self.flags, device=self.device, seed=self.seed + 7919,
                                      requires_grad=True)
            do = random_like_output(small, device=self.device, seed=self.seed + 7920)
            self._grad_case = (kwargs, do, oracle_grads(kwargs, do))
        return self._grad_case

    def row(self, impl: str, mode: str, status: str, reason: str | None = None, **fields) -> dict:
        shape = self.shape
        c = self.costs[mode]
        row = {
            "kind": "bench", "impl": impl, "mode": mode, "suite": self.suite, "shape": shape.label,
            "B": shape.B, "T": shape.T, "H": shape.H, "HV": shape.HV, "K": shape.K, "V": shape.V,
            "n_seqs": shape.n_seqs, "varlen": shape.varlen, "flags": self.flags.name, "dtype": shape.dtype,
            "status": status, "reason": reason, "median_ms": None, "p20_ms": None, "p80_ms": None,
            "speedup_vs_fla": None, "bytes": c.bytes, "flops": c.flops, "n_sets": len(self.sets),
            "set_mb": round(self.set_mb, 1), "slice_tokens": self.span[1] - self.span[0],
            "rel_rmse_tol": FWD_TOL[shape.dtype], "grad_tol": BWD_TOL[shape.dtype] if mode == "fwdbwd" else None,
        }
        row.update(fields)
        if row["median_ms"] is not None:
            roof = model.roofline(c, row["median_ms"], self.context.get("copy_tbps"),
                                  self.context.get("matmul_tflops"))
            row.update(roof._asdict())
        row.update(self.context)
        return row


def bench_impl(case: Case, name: str, impl: Callable | str, timer: Timer) -> list[dict]:
    """Check, then time, one implementation on one case; one row per mode (status ok, refused, unsupported,
    error or skipped, with the reason)."""
    label = f"{name} {case.shape.label} {case.flags.name} {case.shape.dtype}"
    if isinstance(impl, str):
        return [case.row(name, mode, "skipped", impl) for mode in case.modes]
    device, tol = case.device, FWD_TOL[case.shape.dtype]
    start, stop = case.span
    try:
        with torch.no_grad():
            (o, _), warm_fwd = wall(lambda: impl(**case.sets[0]), device)
        log(f"[warm-up] {label} fwd: first call {warm_fwd:.1f} s (compile + autotune)")
        finite = bool(torch.isfinite(o).all())
        from reference.harness import rel_rmse

        err = float(rel_rmse(o[:1, start:stop], case.ref_o)) if finite else float("nan")
        del o
    except Exception as exc:  # reported in the row: one failing implementation must not stop the run
        return [case.row(name, mode, "error", f"first forward failed: {type(exc).__name__}: {exc}")
                for mode in case.modes]
    common = {"rel_rmse": err, "warmup_fwd_s": round(warm_fwd, 2)}
    if not passes(err, tol):
        why = "non-finite output" if not finite else f"rel RMSE {err:.2e} > {tol:.0e}"
        return [case.row(name, mode, "refused", f"forward check vs fp64 oracle failed: {why}", **common)
                for mode in case.modes]
    rows = []
    for mode in case.modes:
        try:
            rows.append(time_fwd(case, name, impl, timer, common) if mode == "fwd"
                        else time_fwdbwd(case, name, impl, timer, common, label))
        except NotImplementedError as exc:
            rows.append(case.row(name, mode, "unsupported", f"NotImplementedError: {exc}", **common))
        except Exception as exc:  # reported in the row
            rows.append(case.row(name, mode, "error", f"{type(exc).__name__}: {exc}", **common))
        finally:
            for kwargs in case.sets:
                for arg in GRAD_NAMES:
                    kwargs[arg].grad = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def time_fwd(case: Case, name: str, impl: Callable, timer: Timer, common: dict) -> dict:
    cycle = itertools.cycle(case.sets)

    def step():
        impl(**next(cycle))

    with torch.no_grad():
        p50, p20, p80 = timer(step)
        peak = peak_memory_gib(lambda: impl(**case.sets[0]), case.device)
    return case.row(name, "fwd", "ok", median_ms=p50, p20_ms=p20, p80_ms=p80, peak_mem_gib=peak, **common)


def time_fwdbwd(case: Case, name: str, impl: Callable, timer: Timer, common: dict, label: str) -> dict:
    pairs = list(zip(case.sets, case.dos, strict=True))

    def run_pair(kwargs: dict, do: torch.Tensor) -> None:
        for arg in GRAD_NAMES:
            kwargs[arg].grad = None
        o, _ = impl(**kwargs)
        o.backward(do)

    _, warm = wall(lambda: run_pair(*pairs[0]), case.device)
    log(f"[warm-up] {label} fwd+bwd: first call {warm:.1f} s (compile + autotune)")
    if not all(bool(torch.isfinite(pairs[0][0][arg].grad).all()) for arg in GRAD_NAMES):
        return case.row(name, "fwdbwd", "refused", "non-finite gradient on the timed shape",
                        warmup_fwdbwd_s=round(warm, 2), **common)
    kwargs, do, ref = case.grad_case()
    errors = grad_errors(impl_grads(impl, kwargs, do), ref)
    worst_name, worst_err = worst(errors)
    checked = {"grad_rel_rmse": worst_err, "grad_worst": worst_name, "warmup_fwdbwd_s": round(warm, 2), **common}
    tol = BWD_TOL[case.shape.dtype]
    if not passes(worst_err, tol):
        return case.row(name, "fwdbwd", "refused",
                        f"gradient check vs fp64 oracle failed: d{worst_name} rel RMSE {worst_err:.2e} > {tol:.0e}",
                        **checked)
    cycle = itertools.cycle(pairs)
    p50, p20, p80 = timer(lambda: run_pair(*next(cycle)))
    peak = peak_memory_gib(lambda: run_pair(*pairs[0]), case.device)
    return case.row(name, "fwdbwd", "ok", median_ms=p50, p20_ms=p20, p80_ms=p80, peak_mem_gib=peak, **checked)


def describe(row: dict) -> str:
    """One progress line for a row."""
    head = f"{row['impl']:>6} {row['mode']:<6} {row['shape']} {row['flags']} {row['dtype']}"
    if row["status"] != "ok":
        return f"{head}: {row['status'].upper()}: {row['reason']}"
    speed = f" x{row['speedup_vs_fla']:.2f} vs fla" if row.get("speedup_vs_fla") else ""
    return (f"{head}: {row['median_ms']:.3f} ms [{row['p20_ms']:.3f}-{row['p80_ms']:.3f}]{speed} | "
            f"{row['tbps']:.2f} TB/s ({fmt(row.get('pct_bw'), '.0f')}%) | {row['tflops']:.1f} TFLOP/s "
            f"({fmt(row.get('pct_mma'), '.0f')}%) | peak {fmt(row.get('peak_mem_gib'), '.2f')} GiB | "
            f"rmse {row['rel_rmse']:.1e}")


def bench_case(suite: str, shape: Shape, flags: FlagSet, impls: dict[str, Callable | str], modes: list[str], *,
               device: torch.device, timer: Timer, context: dict, seed: int = 0) -> list[dict]:
    """All rows of one case, speedups against fla attached (when fla ran)."""
    log(f"case {suite} {shape.label} {flags.name} {shape.dtype}: building inputs and the fp64 oracle slice")
    try:
        case = Case(suite, shape, flags, device=device, seed=seed, modes=modes, context=context)
    except Exception as exc:  # inputs or oracle unavailable: every row says so
        reason = f"case setup failed: {type(exc).__name__}: {exc}"
        log(reason)
        rows = [{"kind": "bench", "impl": name, "mode": mode, "suite": suite, "shape": shape.label,
                 "flags": flags.name, "dtype": shape.dtype, "status": "error", "reason": reason, **context}
                for name in impls for mode in modes]
        return rows
    log(f"  {len(case.sets)} input sets of {case.set_mb:.0f} MB rotated; oracle slice tokens {case.span}")
    rows = []
    for name, impl in impls.items():
        rows.extend(bench_impl(case, name, impl, timer))
    del case
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return attach_speedups(rows)


class JsonlWriter:
    """Appends rows to one JSONL file, flushed row by row so a run cut short keeps what it measured."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def write(self, rows: list[dict]) -> None:
        with self.path.open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def output_path(out: Path, stem: str) -> Path:
    """``out/<stem>-<UTC time>.jsonl``, one file per run."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return out / f"{stem}-{stamp}.jsonl"


def run_cold_start(args: argparse.Namespace, context: dict, writer: JsonlWriter) -> None:
    """Each implementation in a fresh subprocess with an empty Triton cache: process start -> first fwd+bwd."""
    suite = next(iter(resolve_suites(args.suite)))
    shape, flags = SUITES[suite][0], resolve_flags(args.flags)[0]
    for name in args.impl:
        cache = tempfile.mkdtemp(prefix=f"kda-cold-{name}-")
        env = dict(os.environ, TRITON_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        log(f"cold start {name} {shape.label} {flags.name}: fresh process, Triton cache {cache}")
        t0 = time.time()
        cmd = [sys.executable, "-m", "benchmarks.run", "--cold-start-child", name, "--suite", suite,
               "--flags", flags.name, "--seed", str(args.seed), "--t0", repr(t0)]
        row = {"kind": "cold_start", "impl": name, "mode": "fwdbwd", "suite": suite, "shape": shape.label,
               "flags": flags.name, "dtype": shape.dtype, "status": "error", "reason": None, **context}
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.cold_start_timeout)
        except subprocess.TimeoutExpired:
            row["reason"] = f"no result within {args.cold_start_timeout} s"
        else:
            lines = [line for line in done.stdout.splitlines() if line.startswith(COLD_START_TAG)]
            if lines:
                row.update(json.loads(lines[-1][len(COLD_START_TAG):]))
            else:
                row["reason"] = f"exit code {done.returncode}: {(done.stderr or done.stdout)[-800:]}"
        row["parent_wall_s"] = round(time.time() - t0, 2)
        writer.write([row])
        log(f"cold start {name}: {row['status']} {fmt(row.get('cold_start_s'), '.1f')} s to the first fwd+bwd "
            f"(first call {fmt(row.get('first_call_s'), '.1f')} s) {row['reason'] or ''}")


def cold_start_child(args: argparse.Namespace) -> int:
    """Child side of --cold-start: import, build inputs, one fwd+bwd, print one tagged JSON result line."""
    result = {"status": "error", "reason": None}
    message = require_cuda("benchmarks.run --cold-start")
    if message is not None:
        result["reason"] = message
    else:
        impl = load_impls([args.cold_start_child])[args.cold_start_child]
        result["import_s"] = round(time.time() - args.t0, 2)
        if isinstance(impl, str):
            result["reason"] = impl
        else:
            device = torch.device("cuda")
            shape = SUITES[args.suite[0]][0]
            kwargs = make_case_inputs(shape, resolve_flags(args.flags)[0], device=device, seed=args.seed,
                                      requires_grad=True)
            do = random_like_output(shape, device=device, seed=args.seed + 1000)
            synchronize(device)
            t1 = time.time()
            try:
                o, _ = impl(**kwargs)
                o.backward(do)
                synchronize(device)
            except NotImplementedError as exc:
                result.update(status="unsupported", reason=f"NotImplementedError: {exc}")
            else:
                t2 = time.time()
                result.update(status="ok", cold_start_s=round(t2 - args.t0, 2), first_call_s=round(t2 - t1, 2))
    print(COLD_START_TAG + json.dumps(result), flush=True)
    return 0 if result["status"] == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cold_start_child is not None:
        if args.t0 is None:
            args.t0 = time.time()
        return cold_start_child(args)
    message = require_cuda("benchmarks.run")
    if message is not None:
        print(message, file=sys.stderr, flush=True)
        return 2
    device = torch.device("cuda")
    restored = tune_cache.restore(args.tune_cache) if args.tune_cache else 0
    suites = resolve_suites(args.suite)
    flag_sets = resolve_flags(args.flags)
    prov = provenance(device)
    log(f"GPU {prov['gpu']} (cc {prov['cc']}, {prov['sm_count']} SMs, L2 {prov['l2_mb']} MB); torch {prov['torch']}, "
        f"CUDA {prov['cuda']}, triton {prov['triton']}, fla {prov['fla']}, git {prov['git_sha'][:12]}")
    stem = "cold-start" if args.cold_start else "bench-" + "-".join(suites) + ("-quick" if args.quick else "")
    writer = JsonlWriter(output_path(args.out, stem))
    log(f"rows -> {writer.path}")
    if args.cold_start:
        run_cold_start(args, prov, writer)
        return 0
    warmup_ms = args.warmup_ms or (50 if args.quick else 100)
    rep_ms = args.rep_ms or (200 if args.quick else 500)
    timer = cuda_timer(warmup_ms, rep_ms)
    context = {**prov, **measure_ceilings(timer, device),
               "autotune_cache": f"{restored} results restored" if restored else "fresh"}
    decode_rows = []
    for suite in DECODE_SUITES:
        for shape in select_shapes(suites.pop(suite, ()), max_shapes=args.max_shapes):
            for flags in flag_sets:
                log(f"--- decode {shape.label} {flags.name}: pool of {DECODE_SLOTS} slots")
                rows = decode.bench_shape(shape, flags, args.impl, timer, context, slots=DECODE_SLOTS,
                                          device=device, seed=args.seed)
                writer.write(rows)
                decode_rows += rows
                for row in rows:
                    log(decode.describe(row))
    if decode_rows:
        (args.out / "decode.md").write_text(decode.markdown(decode_rows) + "\n")
    impls = load_impls(args.impl) if suites else {}
    plan = [(suite, shape, flags) for suite, shapes in suites.items()
            for shape in select_shapes(shapes, quick=args.quick, max_shapes=args.max_shapes) for flags in flag_sets]
    head_configs = {(shape.H, shape.HV, shape.K, shape.V, shape.varlen) for _, shape, _ in plan}
    log(f"{len(plan)} cases x {len(args.impl)} impls x modes {','.join(args.modes)}; "
        f"{len(head_configs)} head configurations (fla autotunes each: minutes on a fresh machine)")
    for i, (suite, shape, flags) in enumerate(plan, 1):
        log(f"--- case {i}/{len(plan)}")
        rows = bench_case(suite, shape, flags, impls, args.modes, device=device, timer=timer, context=context,
                          seed=args.seed)
        writer.write(rows)
        for row in rows:
            log(describe(row))
        if args.tune_cache:
            log(f"autotune results: {restored} restored, {tune_cache.save(args.tune_cache)} saved to {args.tune_cache}")
    log(f"done: rows in {writer.path}; render with: python -m benchmarks.report {writer.path} --out DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
