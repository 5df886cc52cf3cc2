"""The pipelined compiled forward (`sm90.pieces`): the no-grad forward with the default dispatch at each piece count
(``TRITON_KDA_SM90_PIECES``; 1: the intra stage and the recurrence in turn), Kimi flags, bf16, seed 0, with an
initial and a final state; every piece count's output and final state compared bit for bit with the first's.
A count P@r also sets the taper r (``TRITON_KDA_SM90_TAPER``: each piece's size over the one before it). do_bench
medians; with --repeat R the counts are timed in turn R times, each count's times listed.

    PYTHONPATH=$PWD python3 docs/benchmarks/runs/2026-11-29_pieces/pieces_bench.py [--shapes B2-T8192-H32,...]
        [--pieces 1,2,3@0.5,4] [--repeat 1]
"""
import argparse
import os

import torch
import triton.testing

from benchmarks.cases import make_case_inputs
from benchmarks.suites import FLAG_SETS, parse_shape
from cuda_fast import sm90
from triton_kda import backend_report, chunk_kda


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def set_count(count: str) -> None:
    P, _, r = count.partition("@")
    os.environ[sm90.PIECES_ENV] = P
    os.environ[sm90.TAPER_ENV] = r


def shape_row(text: str, counts: list[str], repeat: int) -> str:
    shape = parse_shape(text)
    kw = make_case_inputs(shape, FLAG_SETS["kimi"], device=torch.device("cuda"), seed=0, requires_grad=False)
    N, HV = kw["v"].shape[0], kw["v"].shape[2]
    kw["initial_state"] = torch.randn(N, HV, sm90.D, sm90.D, device="cuda") * 0.1
    kw["output_final_state"] = True
    notes, times, ref = {}, {P: [] for P in counts}, None
    with torch.no_grad():
        for P in counts:
            set_count(P)
            o, ht = chunk_kda(**kw)
            same = "" if ref is None else (" bit-identical" if torch.equal(o, ref[0]) and torch.equal(ht, ref[1])
                                           else " DIFFERS")
            ref = ref or (o, ht)
            notes[P] = f"{same} ({backend_report()[-1].name})"
        for _ in range(repeat):
            for P in counts:
                set_count(P)
                times[P].append(bench(lambda: chunk_kda(**kw)))
    os.environ.pop(sm90.PIECES_ENV)
    os.environ.pop(sm90.TAPER_ENV)
    return f"{text}: " + ", ".join(f"P{P} {' / '.join(f'{t:.1f}' for t in times[P])} us{notes[P]}" for P in counts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="B2-T8192-H32,B1-T8192-H96,B8-T2048-H32,B1-T8192-H16")
    ap.add_argument("--pieces", default="1,2,4,8,16")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__,
          os.environ.get("TRITON_KDA_NVCC_FLAGS", ""))
    counts = args.pieces.split(",")
    for text in args.shapes.split(","):
        print(shape_row(text, counts, args.repeat), flush=True)


if __name__ == "__main__":
    main()
