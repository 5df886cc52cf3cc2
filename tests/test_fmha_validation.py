"""Bad input to the FMHA entry points raises ValueError/TypeError naming the argument, what it got and what was
expected (checked before any kernel launch)."""
from __future__ import annotations

import pytest
import torch

from tests.utils import DEVICE
from triton_kda.fmha import FmhaConfig, WindowConfig, fmha_fwd, fmha_merge, fmha_swa_compressed

B, T, S, HQ, D = 2, 8, 12, 4, 64


def _q(dtype=torch.float32, shape=(B, T, HQ, D)):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _kv(shape=(B, S, D), dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _i32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


FWD_ERRORS = [
    ("q-not-tensor", lambda: fmha_fwd([1.0], _kv()), TypeError, "`q` must be a torch.Tensor"),
    ("q-3d", lambda: fmha_fwd(_q(shape=(B, T, D)), _kv()), ValueError, "`q` must have 4 dims"),
    ("q-int", lambda: fmha_fwd(_q().to(torch.int32), _kv()), TypeError, "`q` must have dtype"),
    ("q-D96", lambda: fmha_fwd(_q(shape=(B, T, HQ, 96)), _kv((B, S, 96))), ValueError, "head dim D must be one of"),
    ("kv-dtype", lambda: fmha_fwd(_q(), _kv(dtype=torch.float16)), TypeError, "`kv` must have dtype"),
    ("kv-D", lambda: fmha_fwd(_q(), _kv((B, S, 32))), ValueError, "`kv` must be [B, S, D] with D = 64"),
    ("kv-and-k", lambda: fmha_fwd(_q(), _kv(), k=_kv((B, S, 1, D))), ValueError, "either `kv`"),
    ("no-kv", lambda: fmha_fwd(_q()), ValueError, "either `kv`"),
    ("k-without-v", lambda: fmha_fwd(_q(), k=_kv((B, S, 1, D))), ValueError, "`k` and `v` must be given together"),
    ("kv-batch", lambda: fmha_fwd(_q(), _kv((3, S, D))), ValueError, "batch size must equal q's (2)"),
    ("gqa-heads", lambda: fmha_fwd(_q(), k=_kv((B, S, 3, D)), v=_kv((B, S, 3, D))), ValueError,
     "multiple of the 3 kv heads"),
    ("kv-S-mismatch", lambda: fmha_fwd(_q(), k=_kv((B, S, 1, D)), v=_kv((B, S + 1, 1, D))), ValueError,
     "k and v must agree on [S, HKV]"),
    ("DV-48", lambda: fmha_fwd(_q(), k=_kv((B, S, 1, D)), v=_kv((B, S, 1, 48))), ValueError,
     "value head dim DV must be one of"),
    ("scale-neg", lambda: fmha_fwd(_q(), _kv(), scale=-1.0), ValueError, "`scale` must be a positive finite"),
    ("scale-nan", lambda: fmha_fwd(_q(), _kv(), scale=float("nan")), ValueError, "`scale` must be a positive"),
    ("window-no-causal", lambda: fmha_fwd(_q(), _kv(), window=4), ValueError, "pass causal=True"),
    ("window-zero", lambda: fmha_fwd(_q(), _kv(), causal=True, window=0), ValueError, "`window` must be None or"),
    ("window-bool", lambda: fmha_fwd(_q(), _kv(), causal=True, window=True), ValueError, "`window` must be None"),
    ("causal-int", lambda: fmha_fwd(_q(), _kv(), causal=1), TypeError, "`causal` must be a bool"),
    ("sinks-shape", lambda: fmha_fwd(_q(), _kv(), sinks=torch.zeros(3, device=DEVICE)), ValueError,
     "`sinks` must be [HQ] = [4]"),
    ("sinks-int", lambda: fmha_fwd(_q(), _kv(), sinks=_i32([0, 0, 0, 0])), TypeError, "`sinks` must have dtype"),
    ("kv_lens-count", lambda: fmha_fwd(_q(), _kv(), kv_lens=_i32([3])), ValueError,
     "`kv_lens` must have one entry per sequence (2)"),
    ("kv_lens-range", lambda: fmha_fwd(_q(), _kv(), kv_lens=_i32([3, 13])), ValueError,
     "sequence 1 has 13 of 12 rows"),
    ("kv_lens-float", lambda: fmha_fwd(_q(), _kv(), kv_lens=torch.ones(2, device=DEVICE)), TypeError,
     "`kv_lens` must have dtype"),
    ("varlen-batch", lambda: fmha_fwd(_q(), _kv(), cu_seqlens=_i32([0, 8])), ValueError,
     "needs q with batch size 1"),
    ("cu-end", lambda: fmha_fwd(_q(shape=(1, T, HQ, D)), _kv((1, T, D)), cu_seqlens=_i32([0, 3, 7])), ValueError,
     "`cu_seqlens` must start at 0, be non-decreasing and end at 8"),
    ("cu-decreasing", lambda: fmha_fwd(_q(shape=(1, T, HQ, D)), _kv((1, T, D)), cu_seqlens=_i32([0, 5, 3, 8])),
     ValueError, "non-decreasing"),
    ("cu-short", lambda: fmha_fwd(_q(shape=(1, T, HQ, D)), _kv((1, T, D)), cu_seqlens=_i32([0])), ValueError,
     "N + 1 >= 2 offsets"),
    ("cu_k-needed", lambda: fmha_fwd(_q(shape=(1, T, HQ, D)), _kv((1, S, D)), cu_seqlens=_i32([0, 8])), ValueError,
     "need `cu_seqlens_k`"),
    ("cu_k-count", lambda: fmha_fwd(_q(shape=(1, T, HQ, D)), _kv((1, S, D)), cu_seqlens=_i32([0, 8]),
                                    cu_seqlens_k=_i32([0, 4, 12])), ValueError, "must hold 2 offsets"),
    ("cu_k-alone", lambda: fmha_fwd(_q(), _kv(), cu_seqlens_k=_i32([0, 8])), ValueError,
     "`cu_seqlens_k` needs cu_seqlens"),
    ("idx-shape", lambda: fmha_fwd(_q(), _kv(), topk_indices=_i32([[[0]]])), ValueError,
     "`topk_indices` must be [B, T, TOPK]"),
    ("idx-range", lambda: fmha_fwd(_q(), _kv(), topk_indices=torch.full((B, T, 3), S, dtype=torch.int32,
                                                                       device=DEVICE)), ValueError,
     "topk_indices[0, 0, 0] = 12 with valid length 12"),
    ("idx-below", lambda: fmha_fwd(_q(), _kv(), topk_indices=torch.full((B, T, 3), -2, dtype=torch.int32,
                                                                       device=DEVICE)), ValueError,
     "must hold -1 or a key row"),
    ("idx-causal", lambda: fmha_fwd(_q(), _kv(), causal=True, topk_indices=torch.zeros(B, T, 2, dtype=torch.int32,
                                                                                     device=DEVICE)), ValueError,
     "gather mode (topk_indices) has no causal mask"),
    ("idx-float", lambda: fmha_fwd(_q(), _kv(), topk_indices=torch.zeros(B, T, 2, device=DEVICE)), TypeError,
     "`topk_indices` must have dtype"),
    ("splits-zero", lambda: fmha_fwd(_q(), _kv(), num_splits=0), ValueError, "`num_splits` must be None or an int"),
    ("config-type", lambda: fmha_fwd(_q(), _kv(), config=(64, 64)), TypeError, "`config` must be an FmhaConfig"),
    ("partial-int", lambda: fmha_fwd(_q(), _kv(), partial=1), TypeError, "`partial` must be a bool"),
]


@pytest.mark.parametrize("call, exc, message", [p[1:] for p in FWD_ERRORS], ids=[p[0] for p in FWD_ERRORS])
def test_fmha_fwd_rejects(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


def _fused(**kw):
    args = dict(q=_q(), kv=_kv((B, T, D)), kv_cmp=_kv((B, 20, D)),
                topk_indices=torch.zeros(B, T, 4, dtype=torch.int32, device=DEVICE), window=3)
    args.update(kw)
    return fmha_swa_compressed(**args)


FUSED_ERRORS = [
    ("window-none", dict(window=None), ValueError, "`window` must be a positive int for fmha_swa_compressed"),
    ("kv_cmp-D", dict(kv_cmp=_kv((B, 20, 32))), ValueError, "`kv_cmp` must be [B, S, D] with D = 64"),
    ("cmp_lens-range", dict(cmp_lens=_i32([20, 21])), ValueError, "`cmp_lens` must lie in [0, allocated rows]"),
    ("idx-vs-cmp_lens", dict(cmp_lens=_i32([20, 0])), ValueError, "with valid length 0"),
    ("varlen-needs-cu_cmp", dict(q=_q(shape=(1, T, HQ, D)), kv=_kv((1, T, D)), kv_cmp=_kv((1, 20, D)),
                                 topk_indices=torch.zeros(1, T, 4, dtype=torch.int32, device=DEVICE),
                                 cu_seqlens=_i32([0, 8])), ValueError, "needs `cu_seqlens_cmp`"),
]


@pytest.mark.parametrize("kw, exc, message", [p[1:] for p in FUSED_ERRORS], ids=[p[0] for p in FUSED_ERRORS])
def test_fmha_swa_compressed_rejects(kw, exc, message):
    with pytest.raises(exc) as info:
        _fused(**kw)
    assert message in str(info.value)


def _lse(shape=(B, T, HQ)):
    return torch.zeros(*shape, device=DEVICE)


MERGE_ERRORS = [
    ("o-shape", lambda: fmha_merge(_q(), _lse(), _q(shape=(B, T, HQ, 32)), _lse()), ValueError,
     "`o1` and `o2` must have the same shape"),
    ("lse-shape", lambda: fmha_merge(_q(), _lse((B, T)), _q(), _lse()), ValueError, "`lse1` must have 3 dims"),
    ("lse-dims", lambda: fmha_merge(_q(), _lse((B, T, 3)), _q(), _lse()), ValueError, "`lse1` must be [B, T, HQ]"),
    ("lse-dtype", lambda: fmha_merge(_q(), _lse().double(), _q(), _lse()), TypeError, "`lse1` must have dtype"),
    ("sinks", lambda: fmha_merge(_q(), _lse(), _q(), _lse(), sinks=torch.zeros(2, device=DEVICE)), ValueError,
     "`sinks` must be [HQ] = [4]"),
    ("out_dtype", lambda: fmha_merge(_q(), _lse(), _q(), _lse(), out_dtype=torch.int32), TypeError,
     "`out_dtype` must be one of"),
]


@pytest.mark.parametrize("call, exc, message", [p[1:] for p in MERGE_ERRORS], ids=[p[0] for p in MERGE_ERRORS])
def test_fmha_merge_rejects(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(block_m=48, block_n=64), "FmhaConfig.block_m must be a power of two >= 16, got 48"),
        (dict(block_m=64, block_n=8), "FmhaConfig.block_n must be a power of two >= 16, got 8"),
        (dict(block_m=64, block_n=64, block_dv=100), "FmhaConfig.block_dv must be None or a power of two"),
        (dict(block_m=64, block_n=64, num_warps=3), "FmhaConfig.num_warps must be one of"),
        (dict(block_m=64, block_n=64, num_stages=0), "FmhaConfig.num_stages must be an int >= 1"),
    ],
    ids=["block_m-48", "block_n-8", "block_dv-100", "warps-3", "stages-0"],
)
def test_config_rejects(kw, message):
    with pytest.raises(ValueError) as info:
        FmhaConfig(**kw)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(block_m=64, block_d=24, block_dv=64), "WindowConfig.block_d must be a power of two >= 16, got 24"),
        (dict(block_m=64, block_d=64, block_dv=8), "WindowConfig.block_dv must be a power of two >= 16, got 8"),
        (dict(block_m=64, block_d=64, block_dv=64, num_warps=6), "WindowConfig.num_warps must be one of"),
        (dict(block_m=64, block_d=64, block_dv=64, num_stages=True), "WindowConfig.num_stages must be an int >= 1"),
    ],
    ids=["block_d-24", "block_dv-8", "warps-6", "stages-bool"],
)
def test_window_config_rejects(kw, message):
    with pytest.raises(ValueError) as info:
        WindowConfig(**kw)
    assert message in str(info.value)


def test_config_type_is_checked():
    with pytest.raises(TypeError, match="`config` must be an FmhaConfig, a WindowConfig or None, got tuple"):
        fmha_fwd(_q(), _kv(), config=(64, 64))
