"""The no-grad forward (Kimi flags, bf16, default dispatch, seed 0) with the sm90 recurrence on mma.sync
(`TRITON_KDA_SM90_STATE=mma`) and on wgmma (the default on cc 9.0 since 2026-11-29), over every K = V = 128 row of the
standard, kimi, long, gva, varlen and prefill suites: do_bench medians, their ratio, the backend that served and o's
largest difference between the two.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_state64/state_modes.py [--suites kimi,gva]
"""
import argparse
import os

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, SUITES
from cuda_fast import sm90
from triton_kda import backend_report, chunk_kda


def shape_row(suite: str, shape) -> str:
    kw = make_case_inputs(shape, FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0, requires_grad=False)
    t, o = {}, {}
    with torch.no_grad():
        for mode in ("mma", "wgmma"):
            os.environ[sm90.STATE_ENV] = mode
            o[mode] = chunk_kda(**kw)[0]
            t[mode] = triton.testing.do_bench(lambda: chunk_kda(**kw), warmup=50, rep=300,
                                              return_mode="median") * 1e3
            name = backend_report()[-1].name
    os.environ.pop(sm90.STATE_ENV)
    diff = (o["mma"].float() - o["wgmma"].float()).abs().max().item()
    return (f"| {suite} | {shape.label} | {t['mma']:.1f} | "
            f"{t['wgmma']:.1f} | {t['mma'] / t['wgmma']:.3f} | {name} | {diff:.2e} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suites", default="standard,kimi,long,gva,varlen,prefill")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    print("| suite | shape | mma us | wgmma us | mma / wgmma | backend | max abs o diff |")
    print("|---|---|---:|---:|---:|---|---:|")
    for suite in args.suites.split(","):
        for shape in SUITES[suite]:
            if shape.K != 128 or shape.V != 128:
                continue
            print(shape_row(suite, shape), flush=True)


if __name__ == "__main__":
    main()
