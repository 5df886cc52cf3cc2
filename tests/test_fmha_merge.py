"""fmha_merge: identities (an empty branch is a no-op; KV split in two then merged equals one pass; merges chain)
and agreement with the fp64 merge of reference/fmha.py, including -inf rows and sinks."""
from __future__ import annotations

import math

import pytest
import torch

from reference.fmha import fmha_merge_ref, fmha_ref
from tests.fmha_utils import randn
from tests.utils import DEVICE, assert_close
from triton_kda.fmha import fmha_fwd, fmha_merge


def test_merge_with_empty_branch_is_a_no_op():
    """lse = -inf weighs nothing, whatever its o holds (NaN here): the result is o1, lse1 bit for bit."""
    gen = torch.Generator().manual_seed(0)
    o1, lse1 = randn(2, 5, 8, 64, gen=gen), randn(2, 5, 8, gen=gen, scale=3.0)
    o2 = torch.full_like(o1, math.nan)
    lse2 = torch.full_like(lse1, -math.inf)
    out = fmha_merge(o1, lse1, o2, lse2)
    assert torch.equal(out.o, o1)
    assert torch.equal(out.lse, lse1)
    swapped = fmha_merge(o2, lse2, o1, lse1)
    assert torch.equal(swapped.o, o1)
    assert torch.equal(swapped.lse, lse1)


@pytest.mark.parametrize("sinks", [False, True], ids=["nosink", "sinks"])
def test_merge_matches_reference(sinks):
    gen = torch.Generator().manual_seed(1)
    B, T, HQ, DV = 2, 7, 6, 96
    o1, o2 = randn(B, T, HQ, DV, gen=gen), randn(B, T, HQ, DV, gen=gen)
    lse1, lse2 = randn(B, T, HQ, gen=gen, scale=4.0), randn(B, T, HQ, gen=gen, scale=4.0)
    lse1[0, 0] = -math.inf
    lse2[0, 1] = -math.inf
    lse1[1, 2, :2] = -math.inf
    lse2[1, 2, :2] = -math.inf
    sk = randn(HQ, gen=gen, scale=2.0) if sinks else None
    out = fmha_merge(o1, lse1, o2, lse2, sinks=sk)
    ref = fmha_merge_ref(o1, lse1, o2, lse2, sinks=sk)
    assert_close("o", out.o, ref[0], 1e-6)
    assert_close("lse", out.lse, ref[1], 1e-6)
    if not sinks:
        assert torch.equal(out.o[1, 2, :2], torch.zeros_like(out.o[1, 2, :2]))
        assert bool(torch.isneginf(out.lse[1, 2, :2]).all())


@pytest.mark.parametrize(
    "T, causal", [(16, False), (1, True)], ids=["B1-T16-S45-HQ8-D64-full", "B1-T1-S45-HQ8-D64-causal-decode"]
)
def test_split_kv_in_two_then_merge_equals_one_pass(T, causal):
    """Keys [0, c) and [c, S) as two partial calls, merged with the sink, equal one pass and the fp64 oracle (a
    decode query, bottom-right aligned, sees every key of either piece)."""
    gen = torch.Generator().manual_seed(2)
    B, S, HQ, D = 1, 45, 8, 64
    q, kv = randn(B, T, HQ, D, gen=gen), randn(B, S, D, gen=gen)
    sk = randn(HQ, gen=gen, scale=2.0)
    one = fmha_fwd(q, kv, causal=causal, sinks=sk)
    a = fmha_fwd(q, kv[:, :19], causal=causal, partial=True)
    b = fmha_fwd(q, kv[:, 19:], causal=causal, partial=True)
    merged = fmha_merge(a.o, a.lse, b.o, b.lse, sinks=sk)
    ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=causal, sinks=sk)
    assert_close("o vs one pass", merged.o, one.o, 1e-5)
    assert_close("lse vs one pass", merged.lse, one.lse, 1e-5)
    assert_close("o vs fp64", merged.o, ref[0], 1e-5)
    assert_close("lse vs fp64", merged.lse, ref[1], 1e-5)


def test_merges_chain():
    """Partials without a sink merge associatively: ((A + B) + C) with the sink at the end equals one pass."""
    gen = torch.Generator().manual_seed(3)
    q, kv = randn(2, 6, 4, 32, gen=gen), randn(2, 60, 32, gen=gen)
    sk = randn(4, gen=gen)
    parts = [fmha_fwd(q, kv[:, a:b], partial=True) for a, b in ((0, 17), (17, 40), (40, 60))]
    ab = fmha_merge(parts[0].o, parts[0].lse, parts[1].o, parts[1].lse)
    abc = fmha_merge(ab.o, ab.lse, parts[2].o, parts[2].lse, sinks=sk)
    ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], sinks=sk)
    assert_close("o", abc.o, ref[0], 1e-5)
    assert_close("lse", abc.lse, ref[1], 1e-5)


def test_merge_of_nothing_with_a_sink():
    o = torch.zeros(1, 2, 3, 16, device=DEVICE)
    lse = torch.full((1, 2, 3), -math.inf, device=DEVICE)
    sk = torch.tensor([0.5, -1.0, 2.0], device=DEVICE)
    out = fmha_merge(o, lse, o, lse, sinks=sk)
    assert torch.equal(out.o, o)
    assert torch.equal(out.lse, sk.expand(1, 2, 3))
    none = fmha_merge(o, lse, o, lse)
    assert torch.equal(none.o, o)
    assert bool(torch.isneginf(none.lse).all())
