"""fwd+bwd time of the package before and after a backward change, side by side in one process (one GPU call).

    python3 docs/benchmarks/scripts/bwd_before_after.py [--old-dir .old] [--dtypes bf16,fp16] [--rounds 3]
        [--shapes B1-T8192-H16,...] [--profile]

`--old-dir` holds a copy of the earlier `triton_kda` package renamed `triton_kda_old` (e.g.
`git archive <commit> triton_kda | tar -x -C .old` and the package's imports renamed). Times fwd+bwd (forward,
then `o.sum()`-style backward with a fixed upstream gradient into q, k, v, g, beta, A_log, dt_bias) with
`triton.testing.do_bench` medians on the standard suite's shapes with Kimi Linear's flags (l2norm, gate in kernel
with A_log and dt_bias, safe_gate, lower_bound -5, beta sigmoid), alternating old and new for `--rounds` rounds.
Prints one markdown row per shape and dtype: old ms, new ms, new / old. `--profile` also prints each kernel's mean
CUDA time per step (torch.profiler over 10 steps) for old and new.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())

SHAPES = ((1, 8192, 16), (2, 8192, 32), (2, 8192, 64), (8, 2048, 32))


def inputs(B, T, H, dtype, K=128, V=128):
    gen = torch.Generator(device="cuda").manual_seed(0)
    rn = lambda *s: torch.randn(*s, generator=gen, device="cuda")  # noqa: E731
    d = dict(q=rn(B, T, H, K).to(dtype), k=rn(B, T, H, K).to(dtype), v=rn(B, T, H, V).to(dtype),
             g=rn(B, T, H, K).to(dtype), beta=rn(B, T, H).to(dtype),
             A_log=torch.log(1 + 15 * torch.rand(H, generator=gen, device="cuda")),
             dt_bias=0.1 * rn(H * K))
    for t in d.values():
        t.requires_grad_(True)
    return d


def step(fn, d, do):
    o, _ = fn(**d, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
              use_beta_sigmoid_in_kernel=True)
    torch.autograd.backward(o, do)


def kernel_times(fn, d, do, steps=10, run_step=step) -> dict:
    """Mean CUDA time per step (us) of each kernel launched by `steps` fwd+bwd steps (`run_step(fn, d, do)`, by
    default `step`)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run_step(fn, d, do)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run_step(fn, d, do)
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            out[e.key] = t / steps
    return out


def kernel_table(name_a: str, a: dict, name_b: str, b: dict) -> str:
    """Two `kernel_times` results as one markdown table (us per step), the costliest kernels first."""
    rows = [f"| kernel | {name_a} us | {name_b} us |", "|---|---:|---:|"]
    for name in sorted(set(a) | set(b), key=lambda x: -max(a.get(x, 0), b.get(x, 0))):
        rows.append(f"| {name[:70]} | {a.get(name, 0):.1f} | {b.get(name, 0):.1f} |")
    rows.append(f"| total | {sum(a.values()):.1f} | {sum(b.values()):.1f} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-dir", default=".old")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(f"B{b}-T{t}-H{h}" for b, t, h in SHAPES))
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.old_dir))
    from triton_kda_old import chunk_kda as old

    from triton_kda import chunk_kda as new

    dts = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | dtype | old fwd+bwd ms | new fwd+bwd ms | new / old |\n|---|---|---:|---:|---:|")
    for dname in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            B, T, H = (int(x[1:]) for x in shape.split("-"))
            d = inputs(B, T, H, dts[dname])
            do = torch.randn_like(d["v"])
            times = {"old": [], "new": []}
            for _ in range(args.rounds):
                for name, fn in (("old", old), ("new", new)):
                    times[name].append(do_bench(lambda fn=fn, d=d, do=do: step(fn, d, do), warmup=50, rep=300,
                                                grad_to_none=list(d.values())))
            o, n = statistics.median(times["old"]), statistics.median(times["new"])
            print(f"| B{B} T{T} H{H} | {dname} | {o:.3f} | {n:.3f} | {n / o:.3f} |", flush=True)
            if args.profile:
                print(kernel_table("old", kernel_times(old, d, do), "new", kernel_times(new, d, do)), flush=True)
            del d, do
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
