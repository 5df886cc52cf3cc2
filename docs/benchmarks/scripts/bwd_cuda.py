"""fwd+bwd with the compiled chunk-local backward (cuda_fast.sm90_bwd) against the Triton one, side by side in one
process (the registry's switch TRITON_KDA_SM90_BWD=0 turns the compiled kernel off per call), optionally with fla.

    python3 docs/benchmarks/scripts/bwd_cuda.py [--shapes B2-T8192-H32,B2-T8192-H16-K256,...] [--flags kimi,pregated]
        [--rounds 3] [--profile] [--fla]
    ncu --kernel-name regex:kda_intra_bwd --launch-skip 1 --launch-count 1 \
        python3 docs/benchmarks/scripts/bwd_cuda.py --steps 2

Shapes are B-T-H with an optional head dim K (K = V, default 128). Flag set `kimi`: inputs, flags and the step of
`bwd_before_after.py` (Kimi Linear's flags, bf16); `pregated`: benchmarks.suites' pre-gated flag set (g =
logsigmoid(x) passed in, l2norm in the kernel), bf16 inputs of `benchmarks.cases.make_case_inputs`, seed 0. Prints one
markdown row per shape and flag set: Triton-backward ms, CUDA-backward ms, their ratio (and fla's ms and fla / CUDA
with --fla); `--profile` adds each kernel's mean CUDA time per step for both. The last line is a one-line summary.
`--steps N` only runs N steps with the compiled kernel on the first shape and flag set (for ncu).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bwd_before_after  # noqa: E402
from bwd_before_after import kernel_table, kernel_times  # noqa: E402
from bwd_variants import shape_of  # noqa: E402

from benchmarks.cases import make_case_inputs  # noqa: E402
from benchmarks.checks import GRAD_NAMES  # noqa: E402
from benchmarks.suites import FLAG_SETS, Shape  # noqa: E402
from triton_kda import backends, chunk_kda  # noqa: E402

SWITCH = "TRITON_KDA_SM90_BWD"


def with_switch(value: str):
    def fn(**kw):
        os.environ[SWITCH] = value
        return chunk_kda(**kw)
    return fn


def case(shape: str, flags: str):
    """(leaves, step) of a shape and flag set: leaves the inputs that require grad, step(fn, leaves, do) one
    fwd+bwd of `fn` (chunk_kda's signature)."""
    B, T, H, K = shape_of(shape)
    if flags == "kimi":
        return bwd_before_after.inputs(B, T, H, torch.bfloat16, K=K, V=K), bwd_before_after.step
    d = make_case_inputs(Shape(B=B, T=T, H=H, HV=H, K=K, V=K), FLAG_SETS[flags], device=torch.device("cuda"), seed=0,
                         requires_grad=True)
    leaves = {n: d.pop(n) for n in GRAD_NAMES}
    opts = d

    def step(fn, d, do):
        torch.autograd.backward(fn(**d, **opts)[0], do)

    return leaves, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="B2-T8192-H32")
    ap.add_argument("--flags", default="kimi")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--fla", action="store_true")
    ap.add_argument("--steps", type=int, default=0)
    args = ap.parse_args()
    fns = {"triton": with_switch("0"), "cuda": with_switch("1")}
    if args.steps:
        d, step = case(args.shapes.split(",")[0], args.flags.split(",")[0])
        do = torch.randn_like(d["v"])
        for _ in range(args.steps):
            step(fns["cuda"], d, do)
        torch.cuda.synchronize()
        return
    if args.fla:
        from fla.ops.kda import chunk_kda as fla

        fns["fla"] = fla
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"nvcc flags {os.environ.get('TRITON_KDA_NVCC_FLAGS', '')!r}")
    head = "| shape | flags | triton bwd ms | cuda bwd ms | cuda / triton |"
    head += " fla ms | fla / cuda |" if args.fla else ""
    print(head + "\n|---|---|---:|---:|---:|" + ("---:|---:|" if args.fla else ""))
    ratios, fla_ratios = [], []
    for shape, flags in ((s, f) for s in args.shapes.split(",") for f in args.flags.split(",")):
        d, step = case(shape, flags)
        do = torch.randn_like(d["v"])
        backends.clear_backend_report()
        step(fns["cuda"], d, do)
        ran = {e.name for e in backends.backend_report() if e.op == "kda_intra_bwd"}
        assert ran == {"sm90_bwd"}, backends.backend_report()
        times = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(do_bench(lambda fn=fn, d=d, do=do: step(fn, d, do), warmup=50, rep=300,
                                            grad_to_none=list(d.values())))
        t = {name: statistics.median(v) for name, v in times.items()}
        ratios.append(t["cuda"] / t["triton"])
        row = f"| {shape} | {flags} | {t['triton']:.3f} | {t['cuda']:.3f} | {t['cuda'] / t['triton']:.3f} |"
        if args.fla:
            fla_ratios.append(t["fla"] / t["cuda"])
            row += f" {t['fla']:.3f} | {t['fla'] / t['cuda']:.3f} |"
        print(row, flush=True)
        if args.profile:
            print(kernel_table("triton", kernel_times(fns["triton"], d, do, run_step=step), "cuda",
                               kernel_times(fns["cuda"], d, do, run_step=step)), flush=True)
        del d, do
        torch.cuda.empty_cache()
    geo = math.exp(statistics.mean(math.log(r) for r in ratios))
    summary = f"summary: cuda / triton fwd+bwd geomean {geo:.3f} over {len(ratios)} shapes x flag sets"
    if fla_ratios:
        summary += f"; fla / cuda geomean {math.exp(statistics.mean(math.log(r) for r in fla_ratios)):.3f}"
    print(summary)


if __name__ == "__main__":
    main()
