"""The compiled 64-token intra stage (`sm90_v2.intra64_fwd`) against Triton's intra forward at BT = 64 on the same
inputs (Kimi flags, bf16, seed 0): kernel times and the outputs' largest differences; then the no-grad forward with
the default dispatch (`sm90`, 16-token chunks) and with `TRITON_KDA_SM90_FWD=v2` (the compiled intra stage and the
64-token recurrence). do_bench medians.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_intra64/intra64_bench.py [--shapes B2-T8192-H32,...]
"""
import argparse
import os

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from cuda_fast import sm90_v2
from tests.test_cuda_sm90 import _prepare
from triton_kda import backend_report, chunk_kda
from triton_kda.chunk_fwd import intra_stage, plan_chunks


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def shape_row(text: str) -> str:
    kw = make_case_inputs(parse_shape(text), FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0,
                          requires_grad=False)
    with torch.no_grad():
        p, flags, _ = _prepare(kw)
        B, T, HV, V = kw["v"].shape
        plan = plan_chunks(B, T, sm90_v2.BT, kw["q"].device, p.seqlens_cpu, kw.get("cu_seqlens"))
        ins = [kw[name] for name in ("q", "k", "v", "g", "beta")]

        def triton_intra():
            return intra_stage(*ins, p.A_log, p.dt_bias, p.scale, plan, sm90_v2.BT, flags, store_aux=False)

        def compiled_intra():
            return sm90_v2.intra64_fwd(*ins, p.A_log, p.dt_bias, p.scale, plan, flags)

        ref, got = triton_intra(), compiled_intra()
        diffs = " ".join(f"{name} {(getattr(got, name).float() - getattr(ref, name).float()).abs().max().item():.1e}"
                         for name in ("Aqk", "w", "u", "qg", "kg", "gl"))
        row = [f"{text}: intra Triton {bench(triton_intra):.1f} us, compiled {bench(compiled_intra):.1f} us "
               f"(max diff {diffs})"]
        for mode in ("", "v2"):
            os.environ[sm90_v2.ENV_SWITCH] = mode
            t = bench(lambda: chunk_kda(**kw))
            row.append(f"forward {mode or 'default'} {t:.1f} us ({backend_report()[-1].name})")
        os.environ.pop(sm90_v2.ENV_SWITCH)
    return "; ".join(row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="B2-T8192-H32,B1-T8192-H96,B4-T4096-H16,B1-T32768-H16")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for text in args.shapes.split(","):
        print(shape_row(text), flush=True)


if __name__ == "__main__":
    main()
