"""The errors that `tests/test_vs_fla.py` compares, printed: every output and gradient's relative RMSE against the
fp64 oracle, pooled over the test's seeds, ours and fla's on the same inputs, and which backends ran.

    python3 docs/benchmarks/scripts/vs_fla_errors.py [--cases kimi_bf16,pregated_bf16,fp16_masked]

Needs a GPU and fla-core. fla autotunes each case's shapes on a fresh machine (fp16_masked: over five minutes on an
H100, 2026-11-25); `benchmarks/tune_cache.py` can restore saved tuning first.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())

from tests.test_vs_fla import SEEDS, _compare, _report, fp16_masked, kimi_bf16, pregated_bf16  # noqa: E402
from triton_kda import backends  # noqa: E402

CASES = {"kimi_bf16": kimi_bf16, "pregated_bf16": pregated_bf16, "fp16_masked": fp16_masked}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
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
