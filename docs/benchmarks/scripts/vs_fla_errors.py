"""The errors that `tests/test_vs_fla.py` compares, printed: every output and gradient's relative RMSE against the
fp64 oracle, pooled over the test's seeds, ours and fla's on the same inputs, and which backends ran.

    python3 docs/benchmarks/scripts/vs_fla_errors.py [--cases kimi_bf16,pregated_bf16,fp16_masked]
    python3 docs/benchmarks/scripts/vs_fla_errors.py --cases kimi_bf16_k256,pregated_bf16_k256

The K = V = 256 cases are `benchmarks.run`'s gradient-check case of the headdim suite's K = 256 shape (bf16, B1 T256
H16, no initial state; `benchmarks.cases.make_case_inputs`, seeds 0-3), so fla's tuning saved by that suite's runs
serves them.

Needs a GPU and fla-core. fla autotunes each case's shapes on a fresh machine (fp16_masked: over five minutes on an
H100, 2026-11-25); `benchmarks/tune_cache.py` can restore saved tuning first.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())

from benchmarks.cases import make_case_inputs  # noqa: E402
from benchmarks.suites import FLAG_SETS, Shape  # noqa: E402
from tests.test_vs_fla import SEEDS, _compare, _report, fp16_masked, kimi_bf16, pregated_bf16  # noqa: E402
from triton_kda import backends  # noqa: E402

K256 = Shape(B=1, T=256, H=16, HV=16, K=256, V=256)


def k256(flags: str):
    return lambda seed: make_case_inputs(K256, FLAG_SETS[flags], device=torch.device("cuda"), seed=seed,
                                         requires_grad=False)


CASES = {"kimi_bf16": kimi_bf16, "pregated_bf16": pregated_bf16, "fp16_masked": fp16_masked,
         "kimi_bf16_k256": k256("kimi"), "pregated_bf16_k256": k256("pregated")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="kimi_bf16,pregated_bf16,fp16_masked")
    args = ap.parse_args()
    from fla.ops.kda import chunk_kda as fla

    print(torch.cuda.get_device_name())
    for name in args.cases.split(","):
        backends.clear_backend_report()
        ours, theirs = _compare([CASES[name](s) for s in SEEDS], fla)
        print(name, "backends:", sorted({(e.op, e.name) for e in backends.backend_report()}))
        print(name, "(ours / fla pooled rel RMSE):", _report(ours, theirs))
        print(name, "worse than fla:", [n for n in ours if ours[n] > theirs[n]], flush=True)


if __name__ == "__main__":
    main()
