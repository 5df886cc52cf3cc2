"""The fp64 FMHA oracle against independent formulations: torch's SDPA (fp64, explicit masks), gather mode with
indices that enumerate a dense mask, the sink as a closed-form rescale, and its merge."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from reference.fmha import fmha_merge_ref, fmha_ref
from tests.utils import assert_close


def _data(B, T, S, HQ, HKV, D, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, HQ, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, S, HKV, D, generator=gen, dtype=torch.float64)
    v = torch.randn(B, S, HKV, D, generator=gen, dtype=torch.float64)
    return q, k, v


def _sdpa(q, k, v, mask):
    """SDPA in fp64 with an explicit [T, S] boolean mask; kv heads repeated for GQA."""
    G = q.shape[2] // k.shape[2]
    kk = k.repeat_interleave(G, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(G, dim=2).transpose(1, 2)
    return F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize(
    "T, S, HKV, causal, window",
    [(9, 9, 1, True, None), (5, 12, 2, True, None), (7, 20, 1, True, 4), (6, 11, 3, False, None)],
    ids=["T9-S9-HKV1-causal", "T5-S12-HKV2-causal-bottom-right", "T7-S20-HKV1-W4", "T6-S11-HKV3-full"],
)
def test_dense_matches_sdpa(T, S, HKV, causal, window):
    q, k, v = _data(2, T, S, 6, HKV, 16)
    o, lse = fmha_ref(q, k, v, causal=causal, window=window)
    pos = torch.arange(T)[:, None] + (S - T)
    key = torch.arange(S)[None, :]
    mask = torch.ones(T, S, dtype=torch.bool)
    if causal:
        mask &= key <= pos
    if window is not None:
        mask &= key > pos - window
    assert_close("o", o, _sdpa(q, k, v, mask), 1e-12)
    scores = torch.einsum("bthd,bshd->bhts", q, k.repeat_interleave(6 // HKV, dim=2)) * 16**-0.5
    expect = torch.logsumexp(scores.masked_fill(~mask, -math.inf), dim=-1).transpose(1, 2)
    assert_close("lse", lse, expect, 1e-12)


def test_gather_with_dense_indices_equals_dense_causal():
    """Indices listing exactly the keys j <= t (in shuffled order, padded with -1) reproduce the causal result."""
    q, k, v = _data(1, 8, 8, 4, 1, 32, seed=1)
    gen = torch.Generator().manual_seed(4)
    idx = torch.full((1, 8, 11), -1, dtype=torch.int64)
    for t in range(8):
        slots = torch.randperm(11, generator=gen)[: t + 1]
        idx[0, t, slots] = torch.arange(t + 1)
    sinks = torch.tensor([0.3, -2.0, 1.0, 4.0], dtype=torch.float64)
    dense = fmha_ref(q, k, v, causal=True, sinks=sinks)
    gathered = fmha_ref(q, topk_indices=idx, k_gather=k, v_gather=v, sinks=sinks)
    assert_close("o", gathered[0], dense[0], 1e-12)
    assert_close("lse", gathered[1], dense[1], 1e-12)


def test_sink_rescales_the_partial_result():
    """o_sink = o * e^{lse - lse_sink}, lse_sink = logaddexp(lse, sink): the sink only enlarges the denominator."""
    q, k, v = _data(2, 6, 10, 4, 2, 16, seed=2)
    sinks = torch.tensor([1.0, -3.0, 0.0, 5.0], dtype=torch.float64)
    o, lse = fmha_ref(q, k, v, causal=True, partial=True)
    o_s, lse_s = fmha_ref(q, k, v, causal=True, sinks=sinks)
    expect_lse = torch.logaddexp(lse, sinks.expand_as(lse))
    assert_close("lse", lse_s, expect_lse, 1e-12)
    assert_close("o", o_s, o * torch.exp(lse - expect_lse)[..., None], 1e-12)


def test_merge_of_halves_equals_whole():
    q, k, v = _data(1, 4, 30, 8, 1, 16, seed=3)
    sinks = torch.linspace(-2, 2, 8, dtype=torch.float64)
    a = fmha_ref(q, k[:, :13], v[:, :13], partial=True)
    b = fmha_ref(q, k[:, 13:], v[:, 13:], partial=True)
    whole = fmha_ref(q, k, v, sinks=sinks)
    merged = fmha_merge_ref(*a, *b, sinks=sinks)
    assert_close("o", merged[0], whole[0], 1e-12)
    assert_close("lse", merged[1], whole[1], 1e-12)
