"""Pre-gated flags in bf16 (g = logsigmoid(randn) given as the log decay, beta in (0, 1), l2norm in kernel): every
output and gradient's relative RMSE against the fp64 oracle, pooled over seeds, for ours with the compiled
chunk-local backward (where it runs), ours with the Triton one (TRITON_KDA_SM90_BWD=0), the Triton one with other
product precisions or the gate gradient's spanning form (`VARIANTS`) and fla, on the same inputs.

    python3 docs/benchmarks/scripts/pregated_dg.py [--seeds 8] [--cases check,check_state,test]

Cases: `check` is `benchmarks.run`'s gradient check of a pre-gated row (B1 T256 H16 K=V=128, no initial state, only
o's gradient); `check_state` the same with an fp32 initial state and the final state's gradient; `test` is
`tests/test_vs_fla.py`'s pre-gated case (B1 T512 H4). Needs a GPU and fla-core; the last line is a summary.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())

from reference.harness import make_inputs  # noqa: E402
from tests.test_vs_fla import compare, pregated_bf16  # noqa: E402
from triton_kda import chunk_bwd, chunk_kda, configs  # noqa: E402
from triton_kda.configs import BwdPrecision  # noqa: E402


def check(seed: int, state: bool = False) -> dict:
    return make_inputs(1, 256, 16, 16, 128, 128, dtype=torch.bfloat16, gate="logsigmoid",
                       use_qk_l2norm_in_kernel=True, initial_state=state, output_final_state=state, seed=seed)


CASES = {"check": check, "check_state": lambda s: check(s, True), "test": pregated_bf16}


def variant(sm90: str, prec: BwdPrecision | None = None):
    """chunk_kda with the compiled chunk-local backward on ("1") or off ("0"), and the backward's product
    precisions replaced by `prec` (None: the table's). The switch stays set until the next variant's call, so the
    backward that follows the forward sees it too."""
    def fn(**kw):
        os.environ["TRITON_KDA_SM90_BWD"] = sm90
        chunk_bwd.bwd_precision_of = (lambda dtype, gate=0: prec) if prec is not None else configs.bwd_precision_of
        return chunk_kda(**kw)
    return fn


VARIANTS = {
    "ours": variant("1"),
    "triton": variant("0"),
    "triton_intra_x3": variant("0", BwdPrecision("tf32", "tf32x3", "tf32", False)),
    "triton_intra_rn": variant("0", BwdPrecision("tf32", "tf32rn", "tf32", False)),
    "triton_span": variant("0", BwdPrecision("tf32", "tf32", "tf32", True)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    from fla.ops.kda import chunk_kda as fla

    print(torch.cuda.get_device_name())
    summary = []
    for name in args.cases.split(","):
        errs = compare([CASES[name](s) for s in range(args.seeds)], {**VARIANTS, "fla": fla})
        print(f"| {name} | " + " | ".join(errs["ours"]) + " |")
        for impl, e in errs.items():
            print(f"| {impl} | " + " | ".join(f"{v:.3e}" for v in e.values()) + " |", flush=True)
        worse = [n for n in errs["ours"] if errs["ours"][n] > errs["fla"][n]]
        summary.append(f"{name}: ours worse than fla on {worse or 'none'}")
    print("summary: " + "; ".join(summary))


if __name__ == "__main__":
    main()
