"""One benchmark case (suite, shape, flag set): rotated inputs, the oracle checks, then the timed rows of every
implementation, with the bytes/FLOPs model's rates."""
from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from benchmarks import model
from benchmarks.checks import (
    BWD_TOL,
    FWD_TOL,
    GRAD_NAMES,
    SLICE_TOKENS,
    first_sequence,
    grad_errors,
    impl_grads,
    oracle_grads,
    oracle_output,
    passes,
    small_case,
    worst,
)
from benchmarks.cli import fmt, log
from benchmarks.report import attach_speedups
from benchmarks.suites import FlagSet, Shape
from benchmarks.timing import Timer, peak_memory_gib, wall

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


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
