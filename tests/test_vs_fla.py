"""Ours against fla (fla-core 0.6.0) on the same inputs, GPU only: errors against the fp64 recurrent oracle.

- Kimi Linear's flags in bf16 (l2norm, gate in kernel with A_log and dt_bias, safe_gate, lower_bound -5, beta
  sigmoid, fp32 initial state, final-state gradient): every output and gradient's error is at most fla's, pooled
  over several seeds (dA_log has only HV elements per seed, one seed is too noisy to rank two kernels).
- Pre-gated flags in bf16 (g given as logsigmoid log decays, beta in (0, 1), l2norm): every output and gradient's
  error at most fla's, pooled over the seeds.
- The gate-regime sweep (`reference.harness.GATE_REGIMES`: saturated, unsaturated, softplus and masked raw gates, on
  one-sequence rows and GVA varlen, bf16 and fp16): every output and gradient's error at most fla's, pooled over 32
  seeds (dA_log and ddt_bias over the oracle's sums of |terms|), with the default backward and (bf16) the Triton one
  forced.
- fla's own masked varlen test in fp16 (90% of the raw gates -1000, A_log = log U(1, 16), dt_bias ~ randn): the
  gate parameters' gradients within 5e-3, and every output and gradient's error at most fla's, pooled over the
  seeds (H100, 2026-11-24, commit 64c58f2: o 4.8e-4 vs fla 5.3e-4, the closest dh0 2.51e-4 vs 2.62e-4 and ht
  4.49e-4 vs 4.63e-4).
Skipped without a GPU or without fla.
"""
from __future__ import annotations

import pytest
import torch

from benchmarks import gate_regimes
from benchmarks.gate_regimes import BACKWARDS
from reference.harness import GATE_REGIMES, LAYOUTS, case_errors, pool, pooled_errors, regime_inputs
from tests.utils import DEVICE, make_inputs
from triton_kda import chunk_kda

pytestmark = pytest.mark.gpu

SEEDS = range(4)


def _fla():
    return pytest.importorskip("fla.ops.kda").chunk_kda


def _compare(cases, fla) -> tuple[dict, dict]:
    errs = pooled_errors(cases, {"ours": chunk_kda, "fla": fla})
    return errs["ours"], errs.get("fla", {})


def _report(ours: dict, theirs: dict) -> str:
    return "; ".join(f"{n} {ours[n]:.2e} / {theirs.get(n, float('nan')):.2e}" for n in ours)


def kimi_bf16(seed: int) -> dict:
    """Kimi Linear's flags, bf16, B1 T512 H4 K=V=128, fp32 initial state, final-state output."""
    return dict(make_inputs(1, 512, 4, 4, 128, 128, dtype=torch.bfloat16, use_qk_l2norm_in_kernel=True,
                            use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                            initial_state=True, output_final_state=True, seed=seed), safe_gate=True)


def _assert_no_worse_than_fla(case) -> None:
    """Every output and gradient's error at most fla's, pooled over SEEDS inputs `case(seed)`."""
    ours, theirs = _compare([case(s) for s in SEEDS], _fla())
    worse = [n for n in ours if ours[n] > theirs[n]]
    assert not worse, f"ours worse than fla on {worse} (pooled rel RMSE over {len(SEEDS)} seeds, ours / fla): " \
                      + _report(ours, theirs)


def test_kimi_flags_bf16_no_worse_than_fla():
    _assert_no_worse_than_fla(kimi_bf16)


def pregated_bf16(seed: int) -> dict:
    """Pre-gated flags in bf16: g = logsigmoid(randn) given as the log decay, beta in (0, 1), l2norm in kernel,
    B1 T512 H4 K=V=128, fp32 initial state, final-state output."""
    return make_inputs(1, 512, 4, 4, 128, 128, dtype=torch.bfloat16, gate="logsigmoid", use_qk_l2norm_in_kernel=True,
                       initial_state=True, output_final_state=True, seed=seed)


def test_pregated_bf16_no_worse_than_fla():
    _assert_no_worse_than_fla(pregated_bf16)


def fp16_masked(seed: int) -> dict:
    """fla's masked varlen case: fp16, H4, K=V=64, cu_seqlens 0/256/500/1000, softplus gate in kernel with 90% of
    the raw gates -1000, A_log = log U(1, 16), dt_bias ~ randn, beta = sigmoid(rand) (passed as beta), fp32 h0."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    T, H, K, V = 1000, 4, 64, 64

    def rn(*s):
        return torch.randn(*s, generator=gen, device=DEVICE)

    def ru(*s):
        return torch.rand(*s, generator=gen, device=DEVICE)

    g = rn(1, T, H, K)
    g = torch.where(ru(1, T, H, K) < 0.9, torch.full_like(g, -1000.0), g)
    cu = torch.tensor([0, 256, 500, 1000], dtype=torch.int64)
    return dict(q=rn(1, T, H, K).half(), k=rn(1, T, H, K).half(), v=rn(1, T, H, V).half(), g=g.half(),
                beta=torch.sigmoid(ru(1, T, H)).half(), A_log=torch.log(1 + 15 * ru(H)), dt_bias=rn(H * K),
                initial_state=rn(3, H, K, V), output_final_state=True, use_qk_l2norm_in_kernel=True,
                use_gate_in_kernel=True, cu_seqlens=cu.to(DEVICE), cu_seqlens_cpu=cu)


def test_fla_masked_varlen_fp16():
    try:
        fla = _fla()
    except pytest.skip.Exception:
        fla = None
    ours, theirs = _compare([fp16_masked(s) for s in SEEDS], fla)
    for n in ("A_log", "dt_bias"):
        assert ours[n] <= 5e-3, f"d{n}: rel RMSE {ours[n]:.2e} > 5e-3 (pooled over {len(SEEDS)} seeds)"
    if fla is not None:
        worse = [n for n in ours if ours[n] > theirs[n]]
        assert not worse, f"ours worse than fla on {worse} (ours / fla): " + _report(ours, theirs)


SWEEP = [(r, lay, dt) for r in GATE_REGIMES for lay in LAYOUTS for dt in (torch.bfloat16, torch.float16)]
REGIME_SEEDS = range(gate_regimes.SEEDS)  # its comment says why 32


@pytest.mark.parametrize("regime, layout, dtype", SWEEP,
                         ids=[f"{r}-{lay}-{str(dt).removeprefix('torch.')}" for r, lay, dt in SWEEP])
def test_gate_regime_no_worse_than_fla(regime, layout, dtype):
    """The gate-regime sweep (`reference.harness.GATE_REGIMES` on `LAYOUTS`, K = V = 128, l2norm, states): every
    output and gradient's error at most fla's on the same inputs, pooled over REGIME_SEEDS, with each backward; dA_log
    and ddt_bias, sums of many terms, by their error over the oracle's sum of |terms| (`case_errors(by_terms=True)`),
    the measure kda-check judges them by."""
    fla = _fla()
    cases = [regime_inputs(regime, layout, dtype, s, device=DEVICE) for s in REGIME_SEEDS]
    backwards = BACKWARDS if dtype == torch.bfloat16 else {"default": {}}
    per_case = case_errors(cases, {**{b: chunk_kda for b in backwards}, "fla": fla}, envs=backwards, by_terms=True)
    errs = pool(per_case)
    theirs = errs.pop("fla")
    worse = {b: [n for n in ours if ours[n] > theirs[n]] for b, ours in errs.items()}
    worse = {b: w for b, w in worse.items() if w}
    assert not worse, "ours worse than fla: " + "; ".join(
        f"{b} on {w}: " + _report(errs[b], theirs) for b, w in worse.items())
