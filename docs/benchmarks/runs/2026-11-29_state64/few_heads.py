"""The no-grad forward where `sm90`'s verifier hands calls with few heads to Triton (N HV <= 16 over >= 4096 tokens;
sequences Triton's intra-card CP splits): the default dispatch against `sm90` with those two rules off (its wgmma
recurrence, the default on cc 9.0 since 7993a58). Kimi flags, bf16, seed 0, do_bench medians.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_state64/few_heads.py [--shapes B1-T8192-H16,...]
"""
import argparse

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from cuda_fast import sm90
from triton_kda import backend_report, chunk_kda

SHAPES = ("B1-T2048-H16,B1-T4096-H16,B1-T8192-H16,B1-T16384-H16,B1-T32768-H16,B1-T4096-H8,B1-T8192-H8,"
          "B1-T16384-H8,B1-T32768-H8,B1-T65536-H8,B2-T8192-H8,B1-T8192-H24,B1-T65536-H16")


def timed(kw):
    with torch.no_grad():
        o = chunk_kda(**kw)[0]
        ms = triton.testing.do_bench(lambda: chunk_kda(**kw), warmup=30, rep=200, return_mode="median")
    return ms * 1e3, backend_report()[-1].name, o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    print("| shape | default us | backend | sm90 forced us | default / sm90 | max abs o diff |")
    print("|---|---:|---|---:|---:|---:|")
    rules = sm90._few_programs, sm90.piece_chunks
    for text in args.shapes.split(","):
        kw = make_case_inputs(parse_shape(text), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                              requires_grad=False)
        sm90._few_programs, sm90.piece_chunks = rules
        t0, name, o0 = timed(kw)
        sm90._few_programs, sm90.piece_chunks = (lambda *a: False), (lambda *a, **k: 0)
        t1, name1, o1 = timed(kw)
        assert name1 == "sm90", name1
        diff = (o0.float() - o1.float()).abs().max().item()
        print(f"| {text} | {t0:.1f} | {name} | {t1:.1f} | {t0 / t1:.3f} | {diff:.2e} |", flush=True)
    sm90._few_programs, sm90.piece_chunks = rules


if __name__ == "__main__":
    main()
