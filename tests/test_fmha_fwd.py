"""fmha_fwd / fmha_swa_compressed against the fp64 oracle (reference/fmha.py): dense causal / window / full, MQA and
GQA packing, decode and prefill shapes, kv_lens, varlen, top-k gather with empty slots, the fused call, split-KV and
value-dim splits, and causality. fp32 rel RMSE <= 1e-5 (interpreter on CPU); a few fp16 cases at 1e-2 / cos 0.9999.
"""
from __future__ import annotations

import math

import pytest
import torch

from reference.fmha import fmha_ref
from tests.fmha_utils import check_attn, cosine, generator, randn, sink_logits
from tests.utils import DEVICE, assert_close
from triton_kda.fmha import FmhaConfig, fmha_fwd, fmha_merge, fmha_swa_compressed


def _topk(B: int, T: int, topk: int, n_keys, gen, empty: float = 0.3) -> torch.Tensor:
    """Random key rows (distinct per query where possible) with a fraction of -1 slots; n_keys: int or [B]."""
    n_keys = [n_keys] * B if isinstance(n_keys, int) else list(n_keys)
    idx = torch.full((B, T, topk), -1, dtype=torch.int64)
    for b in range(B):
        for t in range(T):
            k = min(topk, n_keys[b])
            idx[b, t, :k] = torch.randperm(max(n_keys[b], 1), generator=gen)[:k]
    drop = torch.rand(B, T, topk, generator=gen) < empty
    idx[drop] = -1
    return idx.to(device=DEVICE, dtype=torch.int32)


DENSE_CASES = [
    # B, T, S, HQ, HKV, D, DV, causal, window, sinks, kv_lens
    pytest.param(2, 37, 37, 8, 1, 64, 64, True, None, True, None, id="B2-T37-S37-HQ8-HKV1-D64-causal-sinks"),
    pytest.param(2, 37, 37, 8, 1, 128, 128, True, None, False, None, id="B2-T37-S37-HQ8-HKV1-D128-causal"),
    pytest.param(1, 29, 29, 4, 1, 256, 256, True, 7, True, None, id="B1-T29-S29-HQ4-HKV1-D256-W7-sinks"),
    pytest.param(1, 29, 29, 4, 1, 512, 512, True, None, True, None, id="B1-T29-S29-HQ4-HKV1-D512-causal-sinks"),
    pytest.param(1, 40, 40, 8, 1, 512, 512, True, 16, True, None, id="B1-T40-S40-HQ8-HKV1-D512-W16-sinks"),
    pytest.param(2, 33, 33, 8, 1, 64, 64, True, 1, False, None, id="B2-T33-S33-HQ8-HKV1-D64-W1"),
    pytest.param(2, 19, 45, 6, 2, 64, 32, False, None, True, None, id="B2-T19-S45-HQ6-HKV2-D64-DV32-full-sinks"),
    pytest.param(2, 12, 50, 6, 3, 128, 64, True, 20, False, None, id="B2-T12-S50-HQ6-HKV3-D128-DV64-W20-chunk"),
    pytest.param(3, 1, 77, 16, 1, 128, 128, True, None, True, [77, 30, 1], id="B3-T1-S77-HQ16-HKV1-D128-decode"),
    pytest.param(2, 1, 90, 64, 1, 512, 512, True, 24, True, [90, 5], id="B2-T1-S90-HQ64-HKV1-D512-W24-decode"),
    pytest.param(2, 5, 48, 4, 1, 64, 64, True, None, False, [48, 3], id="B2-T5-S48-HQ4-HKV1-D64-kvlens-short"),
]


@pytest.mark.parametrize("B, T, S, HQ, HKV, D, DV, causal, window, sinks, kv_lens", DENSE_CASES)
def test_dense_matches_reference(B, T, S, HQ, HKV, D, DV, causal, window, sinks, kv_lens):
    gen = generator(B * 1000 + T * 7 + D)
    q = randn(B, T, HQ, D, gen=gen)
    sk = sink_logits(HQ, gen) if sinks else None
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=DEVICE) if kv_lens is not None else None
    if HKV == 1 and D == DV:
        kv = randn(B, S, D, gen=gen)
        k = v = kv.unsqueeze(2)
        out = fmha_fwd(q, kv, causal=causal, window=window, sinks=sk, kv_lens=lens)
    else:
        k, v = randn(B, S, HKV, D, gen=gen), randn(B, S, HKV, DV, gen=gen)
        out = fmha_fwd(q, k=k, v=v, causal=causal, window=window, sinks=sk, kv_lens=lens)
    ref = fmha_ref(q, k, v, causal=causal, window=window, sinks=sk, kv_lens=lens)
    check_attn(out, ref)


def test_queries_without_keys_give_zero_and_sink_lse():
    """T > kv_len under a bottom-right causal mask leaves the first queries with no key: o = 0 and lse = sink (or
    -inf without sinks)."""
    gen = generator(3)
    q, kv = randn(1, 9, 4, 64, gen=gen), randn(1, 9, 64, gen=gen)
    lens = torch.tensor([4], dtype=torch.int32, device=DEVICE)
    sk = sink_logits(4, gen)
    for sinks in (None, sk):
        out = fmha_fwd(q, kv, causal=True, kv_lens=lens, sinks=sinks)
        ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, kv_lens=lens, sinks=sinks)
        check_attn(out, ref)
        assert torch.equal(out.o[0, :5], torch.zeros_like(out.o[0, :5]))
        expect = torch.full((5, 4), -math.inf, device=DEVICE) if sinks is None else sinks.expand(5, 4)
        assert torch.equal(out.lse[0, :5], expect)


GATHER_CASES = [
    # B, T, S, HQ, HKV, D, TOPK, sinks
    pytest.param(2, 6, 50, 8, 1, 64, 24, True, id="B2-T6-S50-HQ8-HKV1-D64-TOPK24-sinks"),
    pytest.param(1, 4, 70, 16, 1, 512, 40, True, id="B1-T4-S70-HQ16-HKV1-D512-TOPK40-sinks"),
    pytest.param(2, 3, 33, 6, 2, 128, 17, False, id="B2-T3-S33-HQ6-HKV2-D128-TOPK17"),
    pytest.param(1, 2, 20, 64, 1, 256, 8, True, id="B1-T2-S20-HQ64-HKV1-D256-TOPK8-decode"),
]


@pytest.mark.parametrize("B, T, S, HQ, HKV, D, TOPK, sinks", GATHER_CASES)
def test_gather_matches_reference(B, T, S, HQ, HKV, D, TOPK, sinks):
    gen = generator(T * 31 + D + TOPK)
    q = randn(B, T, HQ, D, gen=gen)
    idx = _topk(B, T, TOPK, S, gen)
    idx[0, 0] = -1  # one query with every slot empty
    sk = sink_logits(HQ, gen) if sinks else None
    if HKV == 1:
        kv = randn(B, S, D, gen=gen)
        k = v = kv.unsqueeze(2)
        out = fmha_fwd(q, kv, topk_indices=idx, sinks=sk)
    else:
        k, v = randn(B, S, HKV, D, gen=gen), randn(B, S, HKV, D, gen=gen)
        out = fmha_fwd(q, k=k, v=v, topk_indices=idx, sinks=sk)
    ref = fmha_ref(q, topk_indices=idx, k_gather=k, v_gather=v, sinks=sk)
    check_attn(out, ref)
    assert torch.equal(out.o[0, 0], torch.zeros_like(out.o[0, 0]))


FUSED_CASES = [
    # B, T, S_C, HQ, D, window, TOPK
    pytest.param(2, 21, 30, 8, 64, 5, 16, id="B2-T21-SC30-HQ8-D64-W5-TOPK16"),
    pytest.param(1, 18, 40, 16, 512, 8, 24, id="B1-T18-SC40-HQ16-D512-W8-TOPK24"),
]


@pytest.mark.parametrize("B, T, S_C, HQ, D, window, TOPK", FUSED_CASES)
def test_fused_swa_compressed(B, T, S_C, HQ, D, window, TOPK):
    """One call equals the fp64 joint softmax, and equals merging the two branches computed separately."""
    gen = generator(T + S_C + D)
    q, kv, kc = randn(B, T, HQ, D, gen=gen), randn(B, T, D, gen=gen), randn(B, S_C, D, gen=gen)
    idx = _topk(B, T, TOPK, S_C, gen)
    sk = sink_logits(HQ, gen)
    out = fmha_swa_compressed(q, kv, kc, idx, window=window, sinks=sk)
    ref = fmha_ref(
        q, kv[:, :, None], kv[:, :, None], causal=True, window=window, topk_indices=idx,
        k_gather=kc[:, :, None], v_gather=kc[:, :, None], sinks=sk,
    )
    check_attn(out, ref)
    a = fmha_fwd(q, kv, causal=True, window=window, partial=True)
    b = fmha_fwd(q, kc, topk_indices=idx, partial=True)
    merged = fmha_merge(a.o, a.lse, b.o, b.lse, sinks=sk)
    check_attn(merged, ref)


def test_varlen_dense_and_fused():
    """Varlen with an empty sequence, separate key offsets, kv_lens, and the fused call over varlen keys."""
    gen = generator(11)
    HQ, D = 8, 64
    cu = torch.tensor([0, 5, 5, 30, 41], device=DEVICE)
    q = randn(1, 41, HQ, D, gen=gen)
    kv = randn(1, 41, D, gen=gen)
    sk = sink_logits(HQ, gen)
    out = fmha_fwd(q, kv, causal=True, window=6, cu_seqlens=cu, sinks=sk)
    check_attn(out, fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=6, cu_seqlens=cu, sinks=sk))

    cu_k = torch.tensor([0, 9, 12, 40, 60], dtype=torch.int32, device=DEVICE)
    kv2 = randn(1, 60, D, gen=gen)
    lens = torch.tensor([9, 2, 20, 20], dtype=torch.int32, device=DEVICE)
    out = fmha_fwd(q, kv2, causal=True, cu_seqlens=cu, cu_seqlens_k=cu_k, kv_lens=lens)
    check_attn(out, fmha_ref(q, kv2[:, :, None], kv2[:, :, None], causal=True, cu_seqlens=cu, cu_seqlens_k=cu_k,
                         kv_lens=lens))

    cu_c = torch.tensor([0, 10, 10, 35, 50], device=DEVICE)
    kc = randn(1, 50, D, gen=gen)
    c_lens = torch.tensor([7, 0, 25, 15], dtype=torch.int32, device=DEVICE)
    n_tok = [5, 0, 25, 11]
    idx = torch.cat([_topk(1, n, 12, max(c, 1), gen) if c else torch.full((1, n, 12), -1, dtype=torch.int32,
                     device=DEVICE) for n, c in zip(n_tok, c_lens.tolist(), strict=True)], dim=1)
    out = fmha_swa_compressed(q, kv, kc, idx, window=4, sinks=sk, cmp_lens=c_lens, cu_seqlens=cu,
                              cu_seqlens_cmp=cu_c)
    ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=4, cu_seqlens=cu, topk_indices=idx,
                   k_gather=kc[:, :, None], v_gather=kc[:, :, None], gather_lens=c_lens, cu_seqlens_gather=cu_c,
                   sinks=sk)
    check_attn(out, ref)


SPLIT_CASES = [
    # num_splits, config (None = default), mode
    pytest.param(2, None, "causal", id="splits2-causal"),
    pytest.param(7, FmhaConfig(16, 16), "window", id="splits7-bm16-bn16-window"),
    pytest.param(3, FmhaConfig(32, 32), "gather", id="splits3-bm32-bn32-gather"),
    pytest.param(1, FmhaConfig(32, 16, 32), "causal", id="dv32-causal"),
    pytest.param(4, FmhaConfig(64, 16, 64), "fused", id="splits4-dv64-fused"),
    pytest.param(1, FmhaConfig(16, 64, 16), "full", id="bm16-bn64-dv16-full"),
    pytest.param(1, FmhaConfig(64, 128, None, 4, 3), "window", id="bm64-bn128-window"),
]


@pytest.mark.parametrize("num_splits, config, mode", SPLIT_CASES)
def test_kv_and_value_splits(num_splits, config, mode):
    """Split-KV (partials merged in fp32) and value-dim splits (scores recomputed per program) give the same
    result as the oracle at B2 T9 S100 HQ8 D128."""
    gen = generator(num_splits + 17)
    B, T, S, HQ, D = 2, 9, 100, 8, 128
    q, kv = randn(B, T, HQ, D, gen=gen), randn(B, S, D, gen=gen)
    k = v = kv.unsqueeze(2)
    sk = sink_logits(HQ, gen)
    idx = _topk(B, T, 40, S, gen)
    kw = dict(num_splits=num_splits, config=config, sinks=sk)
    if mode == "gather":
        out = fmha_fwd(q, kv, topk_indices=idx, **kw)
        ref = fmha_ref(q, topk_indices=idx, k_gather=k, v_gather=v, sinks=sk)
    elif mode == "fused":
        out = fmha_swa_compressed(q, kv, kv, idx, window=30, **kw)
        ref = fmha_ref(q, k, v, causal=True, window=30, topk_indices=idx, k_gather=k, v_gather=v, sinks=sk)
    else:
        causal, window = mode != "full", (13 if mode == "window" else None)
        out = fmha_fwd(q, kv, causal=causal, window=window, **kw)
        ref = fmha_ref(q, k, v, causal=causal, window=window, sinks=sk)
    check_attn(out, ref)


def test_partial_mode_skips_sinks():
    gen = generator(5)
    q, kv = randn(1, 10, 4, 64, gen=gen), randn(1, 10, 64, gen=gen)
    out = fmha_fwd(q, kv, causal=True, sinks=sink_logits(4, gen), partial=True)
    assert out.o.dtype == torch.float32
    check_attn(out, fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True))


def test_causality_bitwise():
    """Outputs at positions <= t do not change, bit for bit, when keys/values after t change."""
    gen = generator(9)
    q, kv = randn(1, 40, 8, 64, gen=gen), randn(1, 40, 64, gen=gen)
    for window in (None, 9):
        base = fmha_fwd(q, kv, causal=True, window=window)
        for t in (0, 17, 38):
            kv2 = kv.clone()
            kv2[:, t + 1 :] = randn(1, 39 - t, 64, gen=gen)
            out = fmha_fwd(q, kv2, causal=True, window=window)
            assert torch.equal(out.o[:, : t + 1], base.o[:, : t + 1]), f"window {window}, t {t}"
            assert torch.equal(out.lse[:, : t + 1], base.lse[:, : t + 1]), f"window {window}, t {t}"


@pytest.mark.parametrize("D", [64, 512], ids=["D64-fp16", "D512-fp16"])
def test_fp16_against_fp64(D):
    """fp16 inputs (correct in the interpreter, unlike bf16): rel RMSE <= 1e-2 and cosine >= 0.9999."""
    gen = generator(D)
    q, kv = randn(1, 33, 8, D, gen=gen, dtype=torch.float16), randn(1, 33, D, gen=gen, dtype=torch.float16)
    sk = sink_logits(8, gen)
    out = fmha_fwd(q, kv, causal=True, window=11, sinks=sk)
    ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=11, sinks=sk)
    assert out.o.dtype == torch.float16
    assert_close("o", out.o, ref[0], 1e-2)
    assert_close("lse", out.lse, ref[1], 1e-3)
    assert cosine(out.o, ref[0]) >= 0.9999
