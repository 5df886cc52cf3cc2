"""bf16/fp16 on a CUDA GPU against the fp64 oracle (skipped without one): the correctness grid of
benchmarks/fmha_bench.py (D 64..512, KV up to 8K, windows, sinks, gather with empty slots, fused, varlen, GQA,
split-KV decode, merge identities), each case o rel RMSE <= 1e-2 and cosine >= 0.9999, lse rel RMSE <= 1e-3."""
from __future__ import annotations

import pytest

from benchmarks.fmha_bench import CHECK_CASES, check_case

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CHECK_CASES, ids=[c.name for c in CHECK_CASES])
def test_gpu_against_fp64(case):
    res = check_case(case)
    assert res["ok"], res
