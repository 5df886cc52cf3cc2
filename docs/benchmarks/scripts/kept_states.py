"""GPU, one call: fwd+bwd with the states a training forward keeps for its backward (`state_cp.checkpoint_chunks`,
the default) against none kept (TRITON_KDA_STATE_CKPT_CHUNKS=0: the backward reruns the serial state pass), in one
process: median times alternated over rounds, peak memory, whether every gradient is bit-identical between the two,
and the kernel times of each at the first shape.

    PYTHONPATH=. python3 docs/benchmarks/scripts/kept_states.py [--shapes B1-T8192-H16,...] [--dtypes fp32,bf16]

Shapes and inputs as `bwd_variants.py` (Kimi Linear's flags); the last line is a one-line summary.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bwd_before_after import kernel_times, step  # noqa: E402
from bwd_variants import case, clear_grads, shape_of  # noqa: E402

from benchmarks.timing import peak_memory_gib  # noqa: E402
from triton_kda import chunk_kda  # noqa: E402
from triton_kda.state_cp import ENV_CKPT_CHUNKS, checkpoint_chunks  # noqa: E402

MODES = {"serial": "0", "kept": None}


def mode(name: str) -> None:
    if MODES[name] is None:
        os.environ.pop(ENV_CKPT_CHUNKS, None)
    else:
        os.environ[ENV_CKPT_CHUNKS] = MODES[name]


def grads(d: dict, do: torch.Tensor) -> dict:
    clear_grads(d)
    step(chunk_kda, d, do)
    out = {n: t.grad.clone() for n, t in d.items()}
    clear_grads(d)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="B1-T8192-H16,B2-T8192-H32,B1-T32768-H8")
    ap.add_argument("--dtypes", default="fp32,fp16,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = ["| shape | dtype | spacing | serial ms | kept ms | kept / serial | serial GiB | kept GiB | bit-identical |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    same_all = True
    for dname in args.dtypes.split(","):
        for text in args.shapes.split(","):
            d, do = case(text, dname)
            B, T, H, K = shape_of(text)
            mode("kept")
            L = checkpoint_chunks((T,) * B, 64, H, K, K, d["q"].element_size(), d["q"].device)
            got, times, peaks = {}, {m: [] for m in MODES}, {}
            for m in MODES:
                mode(m)
                got[m] = grads(d, do)
                peaks[m] = peak_memory_gib(lambda: step(chunk_kda, d, do), do.device)
                clear_grads(d)
            for _ in range(args.rounds):
                for m in MODES:
                    mode(m)
                    times[m].append(do_bench(lambda: step(chunk_kda, d, do), warmup=50, rep=300,
                                             grad_to_none=list(d.values())))
            same = all(torch.equal(got["serial"][n], got["kept"][n]) for n in got["serial"])
            same_all &= same
            med = {m: statistics.median(t) for m, t in times.items()}
            rows.append(f"| {text} | {dname} | {L} | {med['serial']:.3f} | {med['kept']:.3f} | "
                        f"{med['kept'] / med['serial']:.3f} | {peaks['serial']:.3f} | {peaks['kept']:.3f} | {same} |")
            print(rows[-1], flush=True)
            del d, do, got
            torch.cuda.empty_cache()
    print("\n".join(rows), flush=True)
    text, prof = args.shapes.split(",")[0], []
    for dname in args.dtypes.split(","):
        d, do = case(text, dname)
        per = {}
        for m in MODES:
            mode(m)
            per[m] = kernel_times(chunk_kda, d, do)
            clear_grads(d)
        keys = sorted({k for p in per.values() for k in p}, key=lambda k: -max(p.get(k, 0) for p in per.values()))
        prof += [f"{text} {dname}, us per fwd+bwd step (torch.profiler, 10 steps)", "| kernel | serial | kept |",
                 "|---|---:|---:|"]
        prof += [f"| {k[:60]} | {per['serial'].get(k, 0):.1f} | {per['kept'].get(k, 0):.1f} |" for k in keys]
        prof.append(f"| total | {sum(per['serial'].values()):.1f} | {sum(per['kept'].values()):.1f} |")
        del d, do
    print("\n".join(prof), flush=True)
    print(f"summary: gradients bit-identical with and without kept states on every row: {same_all}", flush=True)


if __name__ == "__main__":
    main()
