"""benchmarks/fmha_bench.py on CPU: its work model (attended pairs, FLOPs) and its call / oracle plumbing on tiny
fp32 versions of every mode (so the GPU run exercises code that CI has already run)."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks.fmha_bench import (
    BENCHES,
    CHECK_CASES,
    Case,
    attended_pairs,
    check_case,
    flops,
    kernel_resources,
    make_config,
    render,
    render_resources,
    summary,
)
from triton_kda.fmha import FmhaConfig, WindowConfig


def test_attended_pairs():
    causal = Case("c", "dense", 2, 10, 10, 3, 64)
    assert attended_pairs(causal) == 2 * 3 * 55
    window = Case("w", "dense", 1, 10, 10, 1, 64, window=4)
    assert attended_pairs(window) == 1 + 2 + 3 + 4 * 7
    decode = Case("d", "dense", 4, 1, 100, 8, 512)
    assert attended_pairs(decode) == 4 * 8 * 100
    fused = Case("f", "fused", 1, 1, 100, 2, 64, window=8, topk=16, S_C=50, empty=0.0)
    assert attended_pairs(fused) == 2 * (8 + 16)
    assert flops(decode) == 4 * 512 * attended_pairs(decode)


def _tiny(case: Case) -> Case:
    """Shrink a case's sizes (keeping its mode and switches) for the interpreter."""
    small = dict(dtype="fp32", T=min(case.T, 9), S=min(case.S, 40), HQ=min(case.HQ, 8), D=min(case.D, 64),
                 topk=min(case.topk, 12), S_C=min(case.S_C, 30) if case.S_C else 0,
                 window=min(case.window, 5) if case.window else None)
    if case.HKV:
        small["HKV"] = 2
    if case.kv_lens is not None:
        small["kv_lens"] = tuple(min(x, small["S"]) for x in case.kv_lens)
    if case.seqlens is not None:
        small.update(seqlens=(4, 1, 0, 4), T=9, S=9)
    return dataclasses.replace(case, **small)


@pytest.mark.parametrize("case", [_tiny(c) for c in CHECK_CASES], ids=[c.name for c in CHECK_CASES])
def test_check_plumbing_on_cpu(case):
    res = check_case(case, device="cpu")
    assert res["ok"], res
    assert res["o"]["rel_rmse"] <= 1e-5


def test_bench_names_are_unique():
    names = [b.case.name for b in BENCHES] + [c.name for c in CHECK_CASES]
    assert len(names) == len(set(names))


def test_render_and_summary_on_fake_rows():
    ceil = {"matmul_tflops": 800.0, "copy_gbs": 3000.0}
    results = [
        {"case": "a", "dtype": "bf16", "o": {"rel_rmse": 4e-3, "cos": 0.99999, "max_abs": 1e-2},
         "lse": {"rel_rmse": 1e-5}, "ok": True},
        {"case": "m", "dtype": "bf16", "o": {"rel_rmse": 4e-3, "cos": 0.99999, "max_abs": 1e-2},
         "lse": {"rel_rmse": 1e-5}, "ok": True, "empty_branch_noop": True},
        {"case": "b", "dtype": "fp16", "ok": False, "error": "RuntimeError: boom"},
    ]
    rows = [
        {"case": "prefill-B1-T8192-HQ64-D128-causal", "config": None, "resolved": (64, 64, None, 4, 3), "ms": 2.0,
         "tflops": 500.0, "gbs": 10.0, "sdpa_ms": 2.5, "sdpa_expanded_ms": 1.8},
        {"case": "prefill-B1-T8192-HQ64-D512-causal", "config": None, "resolved": (64, 64, None, 8, 2), "ms": 10.0,
         "tflops": 250.0, "gbs": 1.0, "sdpa_error": "RuntimeError: no kernel"},
        {"case": "prefill-B1-T8192-HQ64-D512-causal", "config": (64, 32, None, 8, 3),
         "resolved": (64, 32, None, 8, 3), "ms": 9.0, "tflops": 280.0, "gbs": 1.0},
        {"case": "x", "config": (1, 2, 3, 4, 5), "resolved": (1, 2, 3, 4, 5), "error": "CompilationError: smem"},
    ]
    text = render("# head", ceil, results, rows, "foot")
    assert "| a | bf16 | 4.00e-03 | 0.9999900 |" in text
    assert "empty-branch no-op: True" in text
    assert "| b | fp16 | error: RuntimeError: boom" in text
    assert ("| prefill-B1-T8192-HQ64-D128-causal | (64, 64, None, 4, 3) default | 2.000 | 500 | 62% | 10 | 1.800 | "
            "1.11 |") in text
    assert "1.000 (no SDPA kernel)" not in text and "n/a (no SDPA kernel)" in text
    assert "error: CompilationError: smem" in text and "sdpa_error: RuntimeError: no kernel" in text
    lines = summary(ceil, results, rows)
    assert lines[0] == "correctness: 2/3 ok; FAILED: ['b']"
    assert "= 1.11x (must be <= 1.3x)" in lines[1]
    assert "default (64, 64, None, 8, 2) 250 TFLOP/s = 31% of matmul" in lines[2]
    assert "best config (64, 32, None, 8, 3): 35%" in lines[2]


def test_make_config_and_resources_table():
    assert make_config(("window", 64, 64, 128, 4, 3)) == WindowConfig(64, 64, 128, 4, 3)
    assert make_config((64, 64, None, 8, 2)) == FmhaConfig(64, 64, None, 8, 2)
    assert kernel_resources() == []  # the interpreter compiles nothing
    text = render_resources([{"kernel": "_fmha_window_fwd_kernel", "n_regs": 168, "n_spills": 0, "shared": 73728,
                              "num_warps": 4, "num_stages": 3, "blocks": {"BLOCK_K": 128, "D": 512}}])
    assert "| _fmha_window_fwd_kernel | BLOCK_K=128, D=512 | 4 | 3 | 168 | 0 | 72 |" in text
