"""Times of the 64-token recurrence alone on one intra workspace (Triton's intra forward at BT = 64, Kimi flags, bf16,
seed 0): `kda_state64_fwd_kernel` with one and two consumer warpgroups a CTA and with the launcher's choice, against
Triton's 64-token state pass on the same workspace; then the no-grad forward with the default dispatch and with
`TRITON_KDA_SM90_FWD=v2`. do_bench medians; o's largest difference from Triton's pass.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_state64/state64_bench.py [--shapes B2-T8192-H32,...]
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
from triton_kda.state import state_fwd


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
        intra = intra_stage(*ins, p.A_log, p.dt_bias, p.scale, plan, sm90_v2.BT, flags, store_aux=False)
        h0 = kw.get("initial_state")

        def triton_pass():
            return state_fwd(intra, h0, plan, sm90_v2.BT, V, output_final_state=True, state_v_first=False,
                             store_h=False, store_v_new=False, h_dtype=torch.bfloat16).o

        ref = triton_pass()
        row = [f"{text}: Triton pass {bench(triton_pass):.1f} us"]
        for wgs in (1, 2, 0):
            def fn(wgs=wgs):
                return sm90_v2.state64_fwd(intra, h0, plan, output_final_state=True, state_v_first=False,
                                           wgs=wgs)[0]
            diff = (fn().float() - ref.float()).abs().max().item()
            row.append(f"wgs {wgs} {bench(fn):.1f} us (max|o - Triton| {diff:.2e})")
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
