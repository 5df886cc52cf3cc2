"""How calls are timed: ``do_bench`` medians, synchronized first-call wall times, peak memory, and the machine's
copy bandwidth and bf16 matmul rate measured in the same run."""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from benchmarks.cli import fmt, log

Timer = Callable[[Callable[[], object]], tuple[float, float, float]]


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
