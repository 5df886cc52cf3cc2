"""The single-block sliding-window kernel (triton_kda/fmha/window.py) against the fp64 oracle: forced with a
`WindowConfig` over MQA / GQA packing, D and DV slices, sinks, kv_lens, varlen, partial mode and fp16; the default
dispatch (which windows it takes), NaN-poisoned outputs, causality, and the calls it must refuse."""
from __future__ import annotations

import pytest
import torch

from reference.fmha import fmha_ref
from tests.fmha_utils import check_attn, cosine, generator, randn, sink_logits
from tests.utils import DEVICE, assert_close
from triton_kda.fmha import FmhaConfig, WindowConfig, configs, fmha_fwd, fmha_swa_compressed
from triton_kda.fmha.configs import online_smem, window_config, window_keys

WINDOW_CASES = [
    # B, T, S, HQ, HKV, D, DV, window, sinks, kv_lens, config
    pytest.param(2, 40, 40, 16, 1, 64, 64, 16, True, None, WindowConfig(16, 16, 16),
                 id="B2-T40-HQ16-HKV1-D64-W16-bm16-sinks"),
    pytest.param(1, 37, 37, 32, 1, 512, 512, 20, True, None, WindowConfig(32, 64, 128, 4, 2),
                 id="B1-T37-HQ32-HKV1-D512-W20-bd64-bdv128-sinks"),
    pytest.param(1, 30, 30, 8, 1, 128, 128, 128, False, None, WindowConfig(32, 32, 64),
                 id="B1-T30-HQ8-HKV1-D128-W128-longer-than-T"),
    pytest.param(2, 33, 33, 8, 1, 64, 64, 1, True, None, WindowConfig(32, 16, 16), id="B2-T33-HQ8-HKV1-D64-W1"),
    pytest.param(2, 21, 21, 6, 2, 128, 64, 9, True, None, WindowConfig(16, 32, 16),
                 id="B2-T21-HQ6-HKV2-D128-DV64-W9-gqa3"),
    pytest.param(1, 50, 50, 2, 1, 32, 32, 100, False, None, WindowConfig(64, 16, 32),
                 id="B1-T50-HQ2-HKV1-D32-W100-span131-block256"),
    pytest.param(3, 1, 77, 32, 1, 256, 256, 24, True, [77, 10, 0], WindowConfig(32, 64, 64),
                 id="B3-T1-S77-HQ32-HKV1-D256-W24-decode-kvlens"),
    pytest.param(2, 9, 12, 16, 1, 64, 64, 5, True, [12, 4], WindowConfig(16, 64, 64),
                 id="B2-T9-S12-HQ16-HKV1-D64-W5-chunk-kvlens-no-keys"),
]


def _inputs(B, T, S, HQ, HKV, D, DV, sinks, kv_lens, gen, dtype=torch.float32):
    q = randn(B, T, HQ, D, gen=gen, dtype=dtype)
    if HKV == 1 and D == DV:
        kv = randn(B, S, D, gen=gen, dtype=dtype)
        kw = dict(kv=kv)
        k = v = kv.unsqueeze(2)
    else:
        k, v = randn(B, S, HKV, D, gen=gen, dtype=dtype), randn(B, S, HKV, DV, gen=gen, dtype=dtype)
        kw = dict(k=k, v=v)
    sk = sink_logits(HQ, gen) if sinks else None
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=DEVICE) if kv_lens is not None else None
    return q, k, v, kw, sk, lens


@pytest.mark.parametrize("B, T, S, HQ, HKV, D, DV, window, sinks, kv_lens, config", WINDOW_CASES)
def test_window_kernel_matches_reference(B, T, S, HQ, HKV, D, DV, window, sinks, kv_lens, config):
    gen = generator(B * 100 + T + D + window)
    q, k, v, kw, sk, lens = _inputs(B, T, S, HQ, HKV, D, DV, sinks, kv_lens, gen)
    out = fmha_fwd(q, **kw, causal=True, window=window, sinks=sk, kv_lens=lens, config=config)
    ref = fmha_ref(q, k, v, causal=True, window=window, sinks=sk, kv_lens=lens)
    check_attn(out, ref)
    online = fmha_fwd(q, **kw, causal=True, window=window, sinks=sk, kv_lens=lens, config=FmhaConfig(16, 16))
    assert_close("o vs the online-softmax kernel", out.o, online.o, 1e-5)


def test_window_kernel_varlen_and_partial():
    """Varlen with an empty and a one-token sequence, separate key offsets with kv_lens, and partial mode (fp32 o,
    no sink) merging like the oracle's plain softmax."""
    gen = generator(21)
    HQ, D = 8, 64
    cu = torch.tensor([0, 5, 5, 6, 30], device=DEVICE)
    q, kv = randn(1, 30, HQ, D, gen=gen), randn(1, 30, D, gen=gen)
    sk = sink_logits(HQ, gen)
    cfg = WindowConfig(16, 32, 32)
    out = fmha_fwd(q, kv, causal=True, window=7, cu_seqlens=cu, sinks=sk, config=cfg)
    check_attn(out, fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=7, cu_seqlens=cu, sinks=sk))

    cu_k = torch.tensor([0, 9, 12, 20, 50], dtype=torch.int32, device=DEVICE)
    kv2 = randn(1, 50, D, gen=gen)
    lens = torch.tensor([9, 2, 1, 25], dtype=torch.int32, device=DEVICE)
    out = fmha_fwd(q, kv2, causal=True, window=6, cu_seqlens=cu, cu_seqlens_k=cu_k, kv_lens=lens, config=cfg)
    check_attn(out, fmha_ref(q, kv2[:, :, None], kv2[:, :, None], causal=True, window=6, cu_seqlens=cu,
                         cu_seqlens_k=cu_k, kv_lens=lens))

    part = fmha_fwd(q, kv, causal=True, window=7, sinks=sk, partial=True, config=cfg)
    assert part.o.dtype == torch.float32
    check_attn(part, fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=7))


def test_window_kernel_fp16():
    gen = generator(512)
    q, k, v, kw, sk, _ = _inputs(1, 24, 24, 16, 1, 512, 512, True, None, gen, dtype=torch.float16)
    out = fmha_fwd(q, **kw, causal=True, window=11, sinks=sk, config=WindowConfig(16, 128, 128))
    ref = fmha_ref(q, k, v, causal=True, window=11, sinks=sk)
    assert out.o.dtype == torch.float16
    assert_close("o", out.o, ref[0], 1e-2)
    assert_close("lse", out.lse, ref[1], 1e-3)
    assert cosine(out.o, ref[0]) >= 0.9999


def test_window_kernel_writes_every_output(monkeypatch):
    """o and lse come from NaN-filled buffers: every row, including rows with no key, must be written."""
    empty = torch.empty

    def poisoned(*a, **kw):
        t = empty(*a, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", poisoned)
    gen = generator(4)
    q, kv = randn(2, 13, 16, 64, gen=gen), randn(2, 13, 64, gen=gen)
    lens = torch.tensor([13, 3], dtype=torch.int32, device=DEVICE)
    out = fmha_fwd(q, kv, causal=True, window=4, kv_lens=lens, config=WindowConfig(16, 32, 16))
    assert not out.o.isnan().any() and not out.lse.isnan().any()
    check_attn(out, fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=4, kv_lens=lens))


def test_window_kernel_causal_bitwise():
    """Outputs at positions <= t do not change, bit for bit, when keys/values after t change."""
    gen = generator(8)
    q, kv = randn(1, 40, 16, 64, gen=gen), randn(1, 40, 64, gen=gen)
    cfg = WindowConfig(32, 32, 32)
    base = fmha_fwd(q, kv, causal=True, window=10, config=cfg)
    assert torch.equal(base.o, fmha_fwd(q, kv, causal=True, window=10, config=cfg).o)
    for t in (0, 17, 38):
        kv2 = kv.clone()
        kv2[:, t + 1 :] = randn(1, 39 - t, 64, gen=gen)
        out = fmha_fwd(q, kv2, causal=True, window=10, config=cfg)
        assert torch.equal(out.o[:, : t + 1], base.o[:, : t + 1]), f"t {t}"
        assert torch.equal(out.lse[:, : t + 1], base.lse[:, : t + 1]), f"t {t}"


def test_default_dispatch():
    """A window whose tile keys fit 128 runs the window kernel by default (bit-identical to forcing its default
    config); a longer span, an explicit FmhaConfig or split count runs the online-softmax kernel."""
    dev = torch.device(DEVICE)
    cfg = window_config(64, 8192, 128, dev)
    assert cfg is not None and window_keys(128, cfg.block_m, 64, 8192) == 128
    assert window_config(8, None, 128, dev) is None
    assert window_config(1, 1, 128, dev) is not None
    gen = generator(6)
    q, kv = randn(1, 20, 32, 64, gen=gen), randn(1, 20, 64, gen=gen)
    default = fmha_fwd(q, kv, causal=True, window=9)
    forced = fmha_fwd(q, kv, causal=True, window=9, config=window_config(32, 20, 9, dev))
    assert torch.equal(default.o, forced.o) and torch.equal(default.lse, forced.lse)
    ref = fmha_ref(q, kv[:, :, None], kv[:, :, None], causal=True, window=9)
    check_attn(fmha_fwd(q, kv, causal=True, window=9, num_splits=2), ref)
    check_attn(fmha_fwd(q, kv, causal=True, window=9, config=FmhaConfig(16, 16)), ref)


def _refused(**kw):
    gen = generator(2)
    q, kv = randn(1, 8, 4, 64, gen=gen), randn(1, 8, 64, gen=gen)
    return fmha_fwd(q, kv, **kw)


@pytest.mark.parametrize("call, match", [
    (lambda: _refused(causal=True, config=WindowConfig(16, 16, 16)), "no top-k gather, window given"),
    (lambda: _refused(causal=True, window=300, config=WindowConfig(16, 16, 16)), "need a block of 512 > 256"),
    (lambda: _refused(causal=True, window=4, num_splits=2, config=WindowConfig(16, 16, 16)), "num_splits=2"),
    (lambda: fmha_swa_compressed(
        torch.zeros(1, 4, 4, 64, device=DEVICE), torch.zeros(1, 4, 64, device=DEVICE),
        torch.zeros(1, 6, 64, device=DEVICE), torch.zeros(1, 4, 3, dtype=torch.int32, device=DEVICE), window=2,
        config=WindowConfig(16, 16, 16)), "no top-k gather"),
], ids=["no-window", "span-512", "splits", "fused"])
def test_window_config_refuses_calls_it_cannot_take(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_hopper_table_fits_shared_memory(monkeypatch):
    """On a Hopper-class GPU (faked here) the default launch fits 227 KB: the bf16 D = 512 entry as it is (192 KB,
    Triton's own figure on the H100), fp32 and separate k / v at D = 512 shrunk to fit."""
    monkeypatch.setattr(configs, "arch_of", lambda device: 90)
    dev = torch.device("cuda")
    bf16 = configs.fmha_config(512, 64, 8192, False, dev)
    assert bf16 == FmhaConfig(64, 64, None, 8, 2) and online_smem(bf16, 512, 512, 2, True) == 192 * 1024
    for itemsize, same_kv in ((4, True), (2, False), (4, False)):
        cfg = configs.fmha_config(512, 4, 29, False, dev, itemsize=itemsize, same_kv=same_kv)
        assert online_smem(cfg, 512, 512, itemsize, same_kv) <= 227 * 1024, (itemsize, same_kv, cfg)
        assert cfg.block_m >= 16 and cfg.block_n >= 16
    assert configs.fmha_config(128, 64, 8192, False, dev, itemsize=4) == FmhaConfig(64, 64, None, 4, 3)


@pytest.mark.parametrize("arch", [80, 86, 89, 90, 100, 120])
def test_online_table_fits_every_arch(arch):
    """Every default online-kernel launch fits the arch's shared memory by the estimate (kda-portability checks the
    compiled kernels)."""
    for D in (64, 128, 256, 512):
        for itemsize in (2, 4):
            for gather in (False, True):
                for same_kv in (True, False):
                    cfg = configs.arch_config(arch, D, 64, None if gather else 8192, gather, itemsize=itemsize,
                                              same_kv=same_kv)
                    assert online_smem(cfg, D, D, itemsize, same_kv) <= configs.smem_limit(arch), (D, itemsize, cfg)


def test_fmha_compile_specs_list_every_runtime_argument():
    """The FMHA entries of kda-portability's compile_specs name every runtime argument of their kernel (also when
    the kernels are interpreted, as in this process) and give every constexpr a value."""
    import inspect

    from triton_kda.fmha.specs import fmha_compile_specs

    specs = fmha_compile_specs(90)
    assert len(specs) == 40
    for spec in specs:
        params = inspect.signature(getattr(spec.fn, "fn", spec.fn)).parameters
        runtime = {n for n, p in params.items() if not str(p.annotation).endswith("constexpr")}
        assert set(spec.signature) == runtime, spec.name
        assert set(spec.signature) | set(spec.constexprs) == set(params), spec.name
