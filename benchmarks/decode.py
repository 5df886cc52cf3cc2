"""The decode suite: one serving decode step of ours (``triton_kda.fused_recurrent_kda``) against fla's
``fused_recurrent_kda_fwd`` (the call vLLM makes), in one process on one CUDA GPU.

A step: B sequences of T = 1 token (inputs built by the flag set, Kimi Linear's by default), a state pool
``[slots, HV, K, V]`` fp32 updated in place at B distinct random slots named by int32 ``ssm_state_indices`` on the
device. Ours runs with ``check_indices=False`` (a serving loop's hot path; fla checks nothing either);
``triton-plain`` is ours without the plans it keeps per call signature (full validation and Triton's launch path on
every call).

Timings per implementation:
- ``median_ms``: ``triton.testing.do_bench`` (the run's timer; L2 flushed before each call, so the slots come from
  DRAM as in a model whose other layers ran in between; the flush, a 256 MB memset, hides only as much host time
  per call as it takes on the device: a longer host path adds to the time);
- ``graph_ms``: the step captured ``GRAPH_STEPS`` times in one CUDA graph, median over replays / GRAPH_STEPS
  (no launch overhead; L2 warm between the steps of a replay);
- ``host_us`` (`host_us`): the host's time per call, calls issued back to back without waiting for the device.
Floor: the state bytes that must move, ``2 * B * HV * K * V * 4`` (each slot read and written once), over the copy
bandwidth measured in the same run (``floor_ms``) and over 3.0 TB/s (``floor_ms_3tbps``).
Before timing, each implementation's first step runs on a copy of the pool and is checked against the fp64
oracle (o and the updated slots) and, for ours, for untouched slots; a failing implementation is not timed.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from benchmarks import model
from benchmarks.suites import FlagSet, Shape
from benchmarks.timing import synchronize

GRAPH_STEPS = 10
GRAPH_REPS = 20
HOST_CALLS = 100
HOST_ROUNDS = 5
TOL = {"bf16": 5e-3, "fp16": 1e-3, "fp32": 1e-6}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOKEN_ARGS = ("q", "k", "v", "g", "beta")


def state_floor_ms(shape: Shape, tbps: float | None) -> float | None:
    """Milliseconds to read and write each state of the step once at ``tbps`` TB/s (None without a rate)."""
    if not tbps:
        return None
    return 2 * model.state_bytes(shape.n_seqs, shape.HV, shape.K, shape.V) / (tbps * 1e12) * 1e3


def step_inputs(shape: Shape, flags: FlagSet, device: torch.device, seed: int = 0) -> dict:
    """Keyword arguments of one step without the pool: q, k ``[B, 1, H, K]``, v, g, beta, the gate parameters and
    the flags of ``flags`` (``reference.harness.make_inputs``)."""
    from reference.harness import make_inputs

    d = make_inputs(shape.B, shape.T, shape.H, shape.HV, shape.K, shape.V, dtype=TORCH_DTYPES[shape.dtype],
                    device=device, seed=seed, **flags.make_kwargs)
    d["output_final_state"] = False
    return d


def make_pool(shape: Shape, slots: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(pool ``[slots, HV, K, V]`` fp32 random, int32 indices of B distinct random slots) on ``device``."""
    if shape.B > slots:
        raise ValueError(f"make_pool: B={shape.B} sequences need at least B slots, got slots={slots}")
    gen = torch.Generator(device=device).manual_seed(seed + 17)
    pool = torch.randn(slots, shape.HV, shape.K, shape.V, generator=gen, device=device)
    idx = torch.randperm(slots, generator=gen, device=device)[: shape.B].to(torch.int32)
    return pool, idx


def ours(inputs: dict, pool: torch.Tensor, idx: torch.Tensor):
    from triton_kda import fused_recurrent_kda

    return fused_recurrent_kda(**inputs, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
                               check_indices=False)


def ours_plain(inputs: dict, pool: torch.Tensor, idx: torch.Tensor):
    """``ours`` with ``triton_kda.decode.FAST_PATH`` off: every call validated in full and launched through
    Triton's binder, as before the plans kept per call signature."""
    from triton_kda import decode as kda_decode

    fast, kda_decode.FAST_PATH = kda_decode.FAST_PATH, False
    try:
        return ours(inputs, pool, idx)
    finally:
        kda_decode.FAST_PATH = fast


def fla(inputs: dict, pool: torch.Tensor, idx: torch.Tensor):
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    return fused_recurrent_kda_fwd(**inputs, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True)


STEPS: dict[str, Callable] = {"triton": ours, "triton-plain": ours_plain, "fla": fla}


@contextlib.contextmanager
def forced_config(cfg) -> Iterator[None]:
    """Our decode launches use ``cfg`` (a ``configs.RecurrentConfig``) instead of the table's entry (the plans
    ``fused_recurrent_kda`` keeps per call signature are dropped on entry and exit, so none outlives its config)."""
    from triton_kda import decode as kda_decode
    from triton_kda import recurrent

    table = recurrent.recurrent_fwd_config
    recurrent.recurrent_fwd_config = lambda *args: cfg
    kda_decode.clear_plans()
    try:
        yield
    finally:
        recurrent.recurrent_fwd_config = table
        kda_decode.clear_plans()


def capture_graph(fn: Callable[[], object], steps: int = 1) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``steps`` calls of ``fn``, captured after one warm-up call on a side stream (which
    compiles the kernels outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            fn()
    return graph


def graph_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds per call of ``fn`` replayed from a CUDA graph that holds GRAPH_STEPS calls."""
    graph = capture_graph(fn, GRAPH_STEPS)
    graph.replay()
    times = []
    for _ in range(GRAPH_REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / GRAPH_STEPS)
    return statistics.median(times)


def host_us(fn: Callable[[], object], device: torch.device) -> float:
    """Median over HOST_ROUNDS rounds of the host microseconds per call of ``fn``: HOST_CALLS calls issued back to
    back without waiting for the device (their launches queue up), after a warm-up call."""
    fn()
    synchronize(device)
    rounds = []
    for _ in range(HOST_ROUNDS):
        t0 = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        rounds.append((time.perf_counter() - t0) / HOST_CALLS * 1e6)
        synchronize(device)
    return statistics.median(rounds)


def check_step(step: Callable, inputs: dict, pool: torch.Tensor, idx: torch.Tensor) -> dict:
    """One step on a copy of ``pool``: rel RMSE of o and of the updated slots against the fp64 oracle, and whether
    every other slot kept its bits."""
    from reference.harness import rel_rmse
    from reference.kda import kda_recurrent

    work = pool.clone()
    slots = idx.long()
    o, _ = step(inputs, work, idx)
    with torch.no_grad():
        ref_o, ref_ht = kda_recurrent(**{**inputs, "output_final_state": True}, initial_state=pool[slots])
    others = torch.ones(pool.shape[0], dtype=torch.bool, device=pool.device)
    others[slots] = False
    result = {"rel_rmse": rel_rmse(o, ref_o), "rel_rmse_state": rel_rmse(work[slots], ref_ht),
              "untouched_equal": bool(torch.equal(work[others], pool[others]))}
    del work
    return result


def bench_shape(shape: Shape, flags: FlagSet, impls: list[str], timer, context: dict, *, slots: int,
                device: torch.device, seed: int = 0) -> list[dict]:
    """Rows (kind "decode") of every implementation in ``impls`` ("triton", "fla"; others are skipped) on one
    decode shape: checked, then timed with ``timer`` (do_bench: median, p20, p80) and from a CUDA graph."""
    inputs = step_inputs(shape, flags, device, seed)
    pool, idx = make_pool(shape, slots, device, seed)
    floor = state_floor_ms(shape, context.get("copy_tbps"))
    base = {"kind": "decode", "suite": "decode", "shape": shape.label, "B": shape.B, "T": shape.T, "H": shape.H,
            "HV": shape.HV, "K": shape.K, "V": shape.V, "slots": slots, "dtype": shape.dtype, "flags": flags.name,
            "floor_ms": floor, "floor_ms_3tbps": state_floor_ms(shape, 3.0), "median_ms": None, "graph_ms": None,
            **context}
    rows = []
    for name in impls:
        row = dict(base, impl=name, status="ok", reason=None)
        rows.append(row)
        if name not in STEPS:
            row.update(status="skipped", reason=f"{name} has no decode path")
            continue
        step = STEPS[name]
        try:
            row.update(check_step(step, inputs, pool, idx))
        except Exception as exc:  # an implementation that cannot run is a row, not a crash
            row.update(status="error", reason=f"first step failed: {type(exc).__name__}: {exc}")
            continue
        tol = TOL[shape.dtype]
        if not (row["rel_rmse"] <= tol and row["rel_rmse_state"] <= tol) or (name == "triton"
                                                                                and not row["untouched_equal"]):
            row.update(status="refused", reason=f"check vs fp64 oracle failed (tol {tol:.0e}): o "
                       f"{row['rel_rmse']:.2e}, slots {row['rel_rmse_state']:.2e}, untouched slots equal "
                       f"{row['untouched_equal']}")
            continue
        p50, p20, p80 = timer(lambda step=step: step(inputs, pool, idx))
        row.update(median_ms=p50, p20_ms=p20, p80_ms=p80)
        try:
            row["graph_ms"] = graph_ms(lambda step=step: step(inputs, pool, idx))
        except Exception as exc:  # capture can fail where eager works; the eager time still stands
            row["reason"] = f"CUDA graph capture failed: {type(exc).__name__}: {exc}"
    fla_row = next((r for r in rows if r["impl"] == "fla" and r["status"] == "ok"), None)
    for row in rows:
        for key, out in (("median_ms", "speedup_vs_fla"), ("graph_ms", "graph_speedup_vs_fla")):
            row[out] = model.speedup(fla_row[key], row[key]) if fla_row is not None else None
        for key, out in (("median_ms", "floor_ratio"), ("graph_ms", "graph_floor_ratio")):
            row[out] = row[key] / floor if row[key] is not None and floor else None
    return rows


def describe(row: dict) -> str:
    """One progress line for a decode row."""
    head = f"{row['impl']:>6} decode {row['shape']} slots{row['slots']} {row['flags']} {row['dtype']}"
    if row["status"] != "ok":
        return f"{head}: {row['status'].upper()}: {row['reason']}"

    def f(value, spec):
        return "-" if value is None else format(value, spec)

    return (f"{head}: {row['median_ms'] * 1e3:.1f} us (graph {f(row['graph_ms'] and row['graph_ms'] * 1e3, '.1f')} "
            f"us) x{f(row['speedup_vs_fla'], '.2f')} vs fla (graph x{f(row['graph_speedup_vs_fla'], '.2f')}) | "
            f"floor {f(row['floor_ms'] and row['floor_ms'] * 1e3, '.1f')} us, x{f(row['floor_ratio'], '.2f')} of it"
            f" | rmse o {row['rel_rmse']:.1e} slots {row['rel_rmse_state']:.1e}")


def markdown(rows: list[dict]) -> str:
    """A markdown table of decode rows: times in us, speedups against fla, ratios to the state-traffic floor."""
    from benchmarks.report import cell, markdown_table

    def us(value):
        return cell(value * 1e3 if value is not None else None, ".1f")

    body = [[r["impl"], str(r["B"]), f"H{r['H']} HV{r['HV']} K{r['K']} V{r['V']}", r["dtype"], r["status"],
             us(r.get("median_ms")), us(r.get("graph_ms")), us(r.get("floor_ms")),
             cell(r.get("floor_ratio"), ".2f"), cell(r.get("speedup_vs_fla"), ".2f"),
             cell(r.get("graph_speedup_vs_fla"), ".2f"), cell(r.get("rel_rmse"), ".1e"),
             cell(r.get("rel_rmse_state"), ".1e")] for r in rows]
    headers = ["impl", "B", "heads", "dtype", "status", "do_bench us", "graph us", "floor us", "x floor",
               "x vs fla", "graph x vs fla", "rmse o", "rmse slots"]
    return markdown_table(headers, body, numeric=set(range(5, 13)))
