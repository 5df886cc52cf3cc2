"""Host time against GPU time of a bf16 fwd+bwd step, ours (default dispatch) and fla's, on the GPU machine.

    python3 docs/benchmarks/runs/2026-11-27_host_time/host_probe.py [--shapes B1-T4096-H32,B1-T8192-H16]

Per shape and implementation: the do_bench median of the step; the host time per step (wall time to enqueue 20
steps without synchronizing, over 20: below the launch queue's depth, so the host never waits on the GPU unless a
call synchronizes); the GPU time per step (CUDA events around 20 steps enqueued back to back); and the number of
synchronizing calls in one step (torch.cuda.set_sync_debug_mode("warn")).
"""
from __future__ import annotations

import argparse
import importlib
import time
import warnings

import torch
from triton.testing import do_bench

from benchmarks.roofline import KIMI, step_inputs


def probe(fn, d, do, n=20):
    def step():
        o, _ = fn(**d, **KIMI)
        torch.autograd.backward(o, do)
        for t in d.values():
            t.grad = None

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    host = (time.perf_counter() - t0) / n * 1e3
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        step()
    b.record()
    torch.cuda.synchronize()
    gpu = a.elapsed_time(b) / n
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message)[:90] for w in caught if "synchroniz" in str(w.message)]
    return do_bench(step, warmup=10, rep=100), host, gpu, syncs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="B1-T4096-H32,B1-T8192-H16,B2-T8192-H32")
    args = ap.parse_args()
    fns = {"ours": importlib.import_module("triton_kda").chunk_kda}
    try:
        fns["fla"] = importlib.import_module("fla.ops.kda").chunk_kda
    except ImportError:
        pass
    print(f"{torch.cuda.get_device_name()}; ms per fwd+bwd step (Kimi flags, bf16)")
    print("| shape | impl | do_bench | host (enqueue) | GPU (events) | syncs in one step |")
    print("|---|---|---:|---:|---:|---|")
    for text in args.shapes.split(","):
        dims = {x[0]: int(x[1:]) for x in text.split("-")}
        d, do = step_inputs(dims["B"], dims["T"], dims["H"], 128, torch.bfloat16)
        for name, fn in fns.items():
            med, host, gpu, syncs = probe(fn, d, do)
            print(f"| {text} | {name} | {med:.3f} | {host:.3f} | {gpu:.3f} | {len(syncs)} {'; '.join(syncs[:2])} |",
                  flush=True)


if __name__ == "__main__":
    main()
