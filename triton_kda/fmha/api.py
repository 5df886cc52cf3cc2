"""Public entry points of the FMHA family: `fmha_fwd`, `fmha_swa_compressed` and `fmha_merge`, with their input
checks. Shapes, masks and the lse convention are those of `reference/fmha.py` (the fp64 oracle)."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from triton_kda.configs import cdiv, sm_count
from triton_kda.fmha.configs import FmhaConfig, WindowConfig, fmha_config, window_config
from triton_kda.fmha.fwd import AttnProblem, KeySet, attn_fwd
from triton_kda.fmha.merge import launch_merge
from triton_kda.fmha.window import window_fits, window_fwd

__all__ = ["FmhaOutput", "fmha_fwd", "fmha_merge", "fmha_swa_compressed"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INTS = (torch.int32, torch.int64)
_HEAD_DIMS = (16, 32, 64, 128, 256, 512)


class FmhaOutput(NamedTuple):
    """o `[B, T, HQ, DV]` (q's dtype; fp32 when `partial=True`) and lse `[B, T, HQ]` fp32, natural log."""

    o: torch.Tensor
    lse: torch.Tensor


def _tensor(name: str, t, ndim: int, dtypes: tuple, device: torch.device | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"`{name}` must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"`{name}` must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"`{name}` must be on {device} like q, got {t.device}")
    return t


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _check_q(q) -> torch.Tensor:
    q = _tensor("q", q, 4, _FLOATS)
    if q.shape[3] not in _HEAD_DIMS:
        raise ValueError(f"q's head dim D must be one of {_HEAD_DIMS}, got {q.shape[3]} (q shape {tuple(q.shape)})")
    if q.shape[2] < 1:
        raise ValueError(f"q must have at least one head, got shape {tuple(q.shape)}")
    return _unit_last(q)


def _check_scale(scale, D: int) -> float:
    if scale is None:
        return D**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"`scale` must be a positive finite float or None, got {scale!r}")
    return float(scale)


def _check_kv(name: str, kv, q: torch.Tensor) -> torch.Tensor:
    """MQA key-value tensor [B, S, D] that serves as both k and v: returned as a [B, S, 1, D] view."""
    kv = _tensor(name, kv, 3, (q.dtype,), q.device)
    if kv.shape[2] != q.shape[3]:
        raise ValueError(f"`{name}` must be [B, S, D] with D = {q.shape[3]} (q's head dim), got {tuple(kv.shape)}")
    return _unit_last(kv).unsqueeze(2)


def _check_cu(name: str, cu, total: int, what: str, device: torch.device, check: bool) -> torch.Tensor:
    cu = _tensor(name, cu, 1, _INTS, device)
    if cu.numel() < 2:
        raise ValueError(f"`{name}` must hold N + 1 >= 2 offsets, got {cu.numel()}")
    if check:
        host = cu.tolist()
        if host[0] != 0 or host[-1] != total or any(b < a for a, b in zip(host[:-1], host[1:], strict=True)):
            shown = f"{host[:8]}{' ...' if len(host) > 8 else ''}"
            raise ValueError(f"`{name}` must start at 0, be non-decreasing and end at {total} ({what}), got {shown}")
    return cu


def _alloc_lengths(cu: torch.Tensor | None, batch: int, rows: int, device: torch.device) -> torch.Tensor:
    """Rows allocated to each sequence, [N] int64."""
    if cu is None:
        return torch.full((batch,), rows, dtype=torch.int64, device=device)
    return (cu[1:] - cu[:-1]).to(torch.int64)


def _check_lens(name: str, lens, alloc: torch.Tensor, device: torch.device, check: bool) -> torch.Tensor:
    lens = _tensor(name, lens, 1, _INTS, device)
    if lens.numel() != alloc.numel():
        raise ValueError(f"`{name}` must have one entry per sequence ({alloc.numel()}), got shape {tuple(lens.shape)}")
    if check:
        bad = (lens < 0) | (lens.to(torch.int64) > alloc)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"`{name}` must lie in [0, allocated rows] of each sequence; sequence {i} has {int(lens[i])} "
                f"of {int(alloc[i])} rows"
            )
    return lens.to(torch.int32).contiguous()


def _check_keys(
    label: str,
    k: torch.Tensor,
    v: torch.Tensor,
    q: torch.Tensor,
    cu_q: torch.Tensor | None,
    cu,
    cu_name: str,
    lens,
    lens_name: str,
    check: bool,
) -> KeySet:
    """k `[B, S, HKV, D]`, v `[B, S, HKV, DV]` of one branch, with its varlen offsets and valid lengths."""
    B, T, HQ, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"{label}: batch size must equal q's ({B}), got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if tuple(k.shape[1:3]) != tuple(v.shape[1:3]):
        raise ValueError(f"{label}: k and v must agree on [S, HKV], got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[3] != D:
        raise ValueError(f"{label}: key head dim must equal q's D = {D}, got k {tuple(k.shape)}")
    if v.shape[3] not in _HEAD_DIMS:
        raise ValueError(f"{label}: value head dim DV must be one of {_HEAD_DIMS}, got v {tuple(v.shape)}")
    hkv = k.shape[2]
    if hkv < 1 or HQ % hkv:
        raise ValueError(f"{label}: q's {HQ} heads must be a multiple of the {hkv} kv heads")
    S = k.shape[1]
    if cu_q is not None:
        if cu is None:
            if S != T:
                raise ValueError(f"{label}: varlen keys with S = {S} != T = {T} need `{cu_name}`")
            cu = cu_q
        cu = _check_cu(cu_name, cu, S, f"{label} rows", q.device, check)
        if cu.numel() != cu_q.numel():
            raise ValueError(f"`{cu_name}` must hold {cu_q.numel()} offsets like cu_seqlens, got {cu.numel()}")
    elif cu is not None:
        raise ValueError(f"`{cu_name}` needs cu_seqlens (varlen mode)")
    if lens is not None:
        lens = _check_lens(lens_name, lens, _alloc_lengths(cu, B, S, q.device), q.device, check)
    return KeySet(k, v, cu, lens)


def _check_indices(idx, q: torch.Tensor, keys: KeySet, cu_q: torch.Tensor | None, check: bool) -> torch.Tensor:
    idx = _tensor("topk_indices", idx, 3, _INTS, q.device)
    if tuple(idx.shape[:2]) != tuple(q.shape[:2]) or idx.shape[2] < 1:
        raise ValueError(
            f"`topk_indices` must be [B, T, TOPK] with [B, T] = {list(q.shape[:2])} and TOPK >= 1, "
            f"got {tuple(idx.shape)}"
        )
    if check:
        B, T = q.shape[:2]
        valid = keys.lens.to(torch.int64) if keys.lens is not None else _alloc_lengths(
            keys.cu, B, keys.k.shape[1], q.device
        )
        if cu_q is None:
            per_token = valid[:, None].expand(B, T)
        else:
            seq = torch.searchsorted(cu_q.to(torch.int64), torch.arange(T, device=q.device), right=True) - 1
            per_token = valid[seq][None, :]
        bad = (idx < -1) | (idx.to(torch.int64) >= per_token[..., None])
        if bool(bad.any()):
            b, t, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"`topk_indices` must hold -1 or a key row in [0, valid length) of its sequence; "
                f"topk_indices[{b}, {t}, {i}] = {int(idx[b, t, i])} with valid length {int(per_token[b, t])}"
            )
    return idx.to(torch.int32).contiguous()


def _check_sinks(sinks, HQ: int, device: torch.device) -> torch.Tensor | None:
    if sinks is None:
        return None
    sinks = _tensor("sinks", sinks, 1, _FLOATS, device)
    if sinks.numel() != HQ:
        raise ValueError(f"`sinks` must be [HQ] = [{HQ}] (one logit per query head), got {tuple(sinks.shape)}")
    return sinks.to(torch.float32).contiguous()


def _check_common(q: torch.Tensor, cu_seqlens, check: bool) -> torch.Tensor | None:
    if cu_seqlens is None:
        return None
    if q.shape[0] != 1:
        raise ValueError(f"varlen mode (cu_seqlens given) needs q with batch size 1, got q {tuple(q.shape)}")
    return _check_cu("cu_seqlens", cu_seqlens, q.shape[1], "q's tokens", q.device, check)


def _check_options(num_splits, config, partial) -> None:
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"`num_splits` must be None or an int >= 1, got {num_splits!r}")
    if config is not None and not isinstance(config, (FmhaConfig, WindowConfig)):
        raise TypeError(f"`config` must be an FmhaConfig, a WindowConfig or None, got {type(config).__name__}")
    if not isinstance(partial, bool):
        raise TypeError(f"`partial` must be a bool, got {type(partial).__name__}")


def _check_window(window, causal) -> int | None:
    if not isinstance(causal, bool):
        raise TypeError(f"`causal` must be a bool, got {type(causal).__name__}")
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"`window` must be None or a positive int (keys per query, itself included), got {window!r}")
    if not causal:
        raise ValueError("`window` is a causal sliding window: pass causal=True with it")
    return window


def _run(p: AttnProblem, num_splits: int | None, config: FmhaConfig | WindowConfig | None) -> FmhaOutput:
    q = p.q
    B, T, HQ, D = q.shape
    keys = p.dense if p.dense is not None else p.gather
    G = HQ // keys.k.shape[2]
    gather = p.gather is not None
    T_seq = None if p.cu_seqlens is not None else T
    if isinstance(config, WindowConfig):
        fits, why = window_fits(p, config)
        if not fits or num_splits not in (None, 1):
            why = why or f"it splits no keys, got num_splits={num_splits}"
            raise ValueError(f"`config` {config} selects the single-block window kernel, which cannot take this "
                             f"call: {why}")
        return FmhaOutput(*window_fwd(p, config))
    if config is None and num_splits in (None, 1) and not gather and p.window is not None:
        wcfg = window_config(G, T_seq, p.window, q.device)
        if wcfg is not None:
            return FmhaOutput(*window_fwd(p, wcfg))
    same_kv = all(ks.k is ks.v for ks in (p.dense, p.gather) if ks is not None)
    cfg = config or fmha_config(D, G, T_seq, gather, q.device, DV=keys.v.shape[3], itemsize=q.element_size(),
                                same_kv=same_kv)
    if num_splits is None:
        num_splits = _default_splits(p, cfg, G)
    o, lse = attn_fwd(p, cfg, num_splits)
    return FmhaOutput(o, lse)


def _default_splits(p: AttnProblem, cfg: FmhaConfig, G: int) -> int:
    """Split the keys across programs when the query tiles alone cannot fill the GPU (decode, short prefill)."""
    sms = sm_count(p.q.device)
    if sms <= 1:
        return 1
    B, T, HQ, _ = p.q.shape
    keys = p.dense if p.dense is not None else p.gather
    hkv, DV = keys.k.shape[2], keys.v.shape[3]
    hp = min(G, cfg.block_m)
    block_t = 1 if p.gather is not None else cfg.block_m // hp
    n_tiles = cdiv(T, block_t) + (p.cu_seqlens.numel() - 1 if p.cu_seqlens is not None else 0)
    programs = n_tiles * (1 if p.cu_seqlens is not None else B) * hkv * cdiv(G, hp)
    programs *= DV // min(DV, cfg.block_dv or DV)
    if programs >= sms:
        return 1
    blocks = 0
    if p.dense is not None:
        S = p.dense.k.shape[1]
        span = S if p.window is None else min(S, p.window + block_t)
        blocks += cdiv(span, cfg.block_n)
    if p.gather is not None:
        blocks += cdiv(p.idx.shape[2], cfg.block_n)
    # about two programs per SM, at least four key blocks per split (H100: B32 HQ64 decode 0.21 ms with this rule,
    # 0.35 ms with whole-wave rounding and two blocks per split; docs/benchmarks/fmha_H100.md)
    return max(1, min(cdiv(2 * sms, programs), blocks // 4, 64))


def fmha_fwd(
    q: torch.Tensor,
    kv: torch.Tensor | None = None,
    *,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    scale: float | None = None,
    causal: bool = False,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    topk_indices: torch.Tensor | None = None,
    partial: bool = False,
    num_splits: int | None = None,
    config: FmhaConfig | None = None,
    check_inputs: bool = True,
) -> FmhaOutput:
    """Softmax attention with MQA/GQA head packing, causal / sliding-window masks, per-head sinks and top-k gather.

    Args:
        q: `[B, T, HQ, D]` fp16/bf16/fp32, D in (16, 32, 64, 128, 256, 512).
        kv: `[B, S, D]` one shared head used as both keys and values (MQA); or pass `k` `[B, S, HKV, D]` and
            `v` `[B, S, HKV, DV]` (HQ % HKV == 0; query head h reads kv head h // (HQ // HKV)).
        scale: multiplies q.k; default D ** -0.5.
        causal: bottom-right aligned (query t of a sequence with T_n queries and L_n keys sits at L_n - T_n + t).
        window: sliding window W (needs causal): a query at position p sees keys p - W < j <= p.
        sinks: `[HQ]` per-head logit added to the softmax denominator only (applied in the epilogue).
        kv_lens: `[N]` int, valid keys per sequence (the rest of its S rows are ignored).
        cu_seqlens: `[N + 1]` int offsets of the T axis (varlen; B must be 1); cu_seqlens_k those of S (defaults
            to cu_seqlens when S == T).
        topk_indices: `[B, T, TOPK]` int; gather mode: query (b, t) attends to key rows topk_indices[b, t, :] of its
            sequence (-1 = empty slot), with no causal mask; shared by all heads of the token.
        partial: return each query's softmax average over its own keys (fp32, sinks not applied) and its lse, for
            `fmha_merge`.
        num_splits: split each query tile's keys over this many programs and combine them exactly (default: chosen
            from the GPU's size when the query tiles cannot fill it).
        config: an `FmhaConfig` (the online-softmax kernel) or a `WindowConfig` (the single-block window kernel)
            overriding the launch table. By default a sliding window whose tile keys fit one block of 128 runs the
            window kernel, everything else the online-softmax kernel.
        check_inputs: check the contents of cu_seqlens / kv_lens / topk_indices (one host sync); the kernel itself
            skips out-of-range indices either way.

    Returns:
        FmhaOutput(o `[B, T, HQ, DV]`, lse `[B, T, HQ]` fp32). lse = log(sum_j e^{s_j} + e^{sink_h}) (natural log);
        a query with no key gets o = 0 and lse = -inf (lse = sink_h when sinks are given).
    """
    q = _check_q(q)
    D = q.shape[3]
    scale = _check_scale(scale, D)
    window = _check_window(window, causal)
    _check_options(num_splits, config, partial)
    if (kv is None) == (k is None and v is None):
        raise ValueError("pass either `kv` ([B, S, D], MQA) or both `k` and `v`, not both and not neither")
    if kv is not None:
        k = v = _check_kv("kv", kv, q)
    else:
        if k is None or v is None:
            raise ValueError("`k` and `v` must be given together")
        k = _unit_last(_tensor("k", k, 4, (q.dtype,), q.device))
        v = _unit_last(_tensor("v", v, 4, (q.dtype,), q.device))
    cu_q = _check_common(q, cu_seqlens, check_inputs)
    keys = _check_keys("keys", k, v, q, cu_q, cu_seqlens_k, "cu_seqlens_k", kv_lens, "kv_lens", check_inputs)
    sinks = _check_sinks(sinks, q.shape[2], q.device)
    if topk_indices is not None:
        if causal or window is not None:
            raise ValueError("gather mode (topk_indices) has no causal mask: leave causal=False and window=None")
        idx = _check_indices(topk_indices, q, keys, cu_q, check_inputs)
        p = AttnProblem(q, scale, None, False, None, keys, idx, sinks, cu_q, partial)
    else:
        p = AttnProblem(q, scale, keys, causal, window, None, None, sinks, cu_q, partial)
    return _run(p, num_splits, config)


def fmha_swa_compressed(
    q: torch.Tensor,
    kv: torch.Tensor,
    kv_cmp: torch.Tensor,
    topk_indices: torch.Tensor,
    *,
    window: int,
    sinks: torch.Tensor | None = None,
    scale: float | None = None,
    kv_lens: torch.Tensor | None = None,
    cmp_lens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    cu_seqlens_cmp: torch.Tensor | None = None,
    partial: bool = False,
    num_splits: int | None = None,
    config: FmhaConfig | None = None,
    check_inputs: bool = True,
) -> FmhaOutput:
    """Fused single call of the two DeepSeek-V4 branches: a causal sliding window over `kv` and the compressed
    keys `kv_cmp` read through `topk_indices`, in one softmax with the sink:
    `o = (e^l1 o1 + e^l2 o2) / (e^l1 + e^l2 + e^sink_h)`, without writing either branch to memory.

    Args:
        q: `[B, T, HQ, D]`; kv: `[B, S, D]` (shared MQA head, both keys and values of the window branch);
        kv_cmp: `[B, S_C, D]` compressed keys/values; topk_indices: `[B, T, TOPK]` int rows of kv_cmp (-1 = empty).
        window: W >= 1, the window branch is causal (bottom-right aligned, query at p sees p - W < j <= p).
        kv_lens / cmp_lens: `[N]` valid rows of kv / kv_cmp per sequence; cu_seqlens / cu_seqlens_k /
        cu_seqlens_cmp: varlen offsets of q / kv / kv_cmp (B == 1; cu_seqlens_k defaults to cu_seqlens when
        S == T). Other arguments as in `fmha_fwd`.

    Returns:
        FmhaOutput(o `[B, T, HQ, D]`, lse `[B, T, HQ]` fp32), the lse of both branches and the sink together.
    """
    q = _check_q(q)
    D = q.shape[3]
    scale = _check_scale(scale, D)
    if window is None:
        raise ValueError("`window` must be a positive int for fmha_swa_compressed, got None")
    window = _check_window(window, True)
    _check_options(num_splits, config, partial)
    kv = _check_kv("kv", kv, q)
    kv_cmp = _check_kv("kv_cmp", kv_cmp, q)
    cu_q = _check_common(q, cu_seqlens, check_inputs)
    dense = _check_keys("kv", kv, kv, q, cu_q, cu_seqlens_k, "cu_seqlens_k", kv_lens, "kv_lens", check_inputs)
    if cu_q is not None and cu_seqlens_cmp is None:
        raise ValueError("varlen mode needs `cu_seqlens_cmp` (the offsets of kv_cmp's rows)")
    gth = _check_keys(
        "kv_cmp", kv_cmp, kv_cmp, q, cu_q, cu_seqlens_cmp, "cu_seqlens_cmp", cmp_lens, "cmp_lens", check_inputs
    )
    idx = _check_indices(topk_indices, q, gth, cu_q, check_inputs)
    sinks = _check_sinks(sinks, q.shape[2], q.device)
    p = AttnProblem(q, scale, dense, True, window, gth, idx, sinks, cu_q, partial)
    return _run(p, num_splits, config)


def fmha_merge(
    o1: torch.Tensor,
    lse1: torch.Tensor,
    o2: torch.Tensor,
    lse2: torch.Tensor,
    sinks: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> FmhaOutput:
    """Merge two partial results exactly: `o = (e^l1 o1 + e^l2 o2) / (e^l1 + e^l2 + e^sink_h)`,
    `lse = log(e^l1 + e^l2 + e^sink_h)`.

    Args:
        o1, o2: `[B, T, HQ, DV]` fp16/bf16/fp32 (each its branch's softmax average, e.g. from `partial=True`).
        lse1, lse2: `[B, T, HQ]` fp32 natural-log normalisers (-inf marks an empty branch: it weighs nothing).
        sinks: `[HQ]` or None (None keeps the result partial, so merges chain).
        out_dtype: dtype of o; default o1's.

    Returns:
        FmhaOutput(o `[B, T, HQ, DV]`, lse `[B, T, HQ]` fp32); a row with nothing in it gets o = 0, lse = -inf.
    """
    o1 = _tensor("o1", o1, 4, _FLOATS)
    o2 = _tensor("o2", o2, 4, _FLOATS, o1.device)
    if o1.shape != o2.shape:
        raise ValueError(f"`o1` and `o2` must have the same shape, got {tuple(o1.shape)} and {tuple(o2.shape)}")
    lse1 = _tensor("lse1", lse1, 3, (torch.float32,), o1.device)
    lse2 = _tensor("lse2", lse2, 3, (torch.float32,), o1.device)
    for name, t in (("lse1", lse1), ("lse2", lse2)):
        if tuple(t.shape) != tuple(o1.shape[:3]):
            raise ValueError(f"`{name}` must be [B, T, HQ] = {list(o1.shape[:3])}, got {tuple(t.shape)}")
    B, T, HQ, DV = o1.shape
    sinks = _check_sinks(sinks, HQ, o1.device)
    if out_dtype is None:
        out_dtype = o1.dtype
    elif out_dtype not in _FLOATS:
        raise TypeError(f"`out_dtype` must be one of {[str(d) for d in _FLOATS]} or None, got {out_dtype!r}")
    n = B * T * HQ
    o, lse = launch_merge(
        o1.contiguous().view(1, n, DV), lse1.contiguous().view(1, n), o2.contiguous().view(n, DV),
        lse2.contiguous().view(n), HQ, sinks, out_dtype,
    )
    return FmhaOutput(o.view(B, T, HQ, DV), lse.view(B, T, HQ))
