"""fp64 oracle for the FMHA family (softmax attention with MQA/GQA, sliding window, sinks, top-k gather, merge).

Everything is computed per sequence with explicit score matrices and masks, in float64, on whatever device the
inputs live on. Nothing here shares code with the Triton kernels: the kernels run an online softmax over key blocks,
this module materialises every score and takes one log-sum-exp over the union of all keys a query sees (dense keys,
gathered keys and the sink logit as one extra column).

Conventions (the kernels follow the same contract)
- q `[B, T, HQ, D]`; k `[B, S, HKV, D]`, v `[B, S, HKV, DV]`; query head `h` reads kv head `h // (HQ // HKV)`.
- Varlen: `B == 1`, `cu_seqlens` `[N + 1]` splits the T axis, `cu_seqlens_k` the S axis.
- `kv_lens[n]` (optional) is the number of valid keys of sequence n (the rest of its S rows are ignored).
- Causal masks are bottom-right aligned: query `t` of a sequence with `T_n` queries and `L_n` valid keys sits at
  position `p = L_n - T_n + t` and sees keys `j <= p`; a window `W` further restricts to `j > p - W`.
- Gather: `topk_indices[b, t, i]` is a key row of the sequence (`0 <= idx < L_n`), `-1` marks an empty slot; there
  is no causal mask in this mode.
- `lse` is the natural-log normaliser. Final mode: `o = sum_j e^{s_j} v_j / Z`, `Z = sum_j e^{s_j} + e^{sink_h}`,
  `lse = log Z`. Partial mode (`partial=True`): sinks are not applied, `o` is the softmax average over the query's own
  keys and `lse = log sum_j e^{s_j}`. A query with no key gets `o = 0` and `lse = -inf` (or `lse = sink_h` in final
  mode with sinks).
"""
from __future__ import annotations

import math

import torch

__all__ = ["fmha_merge_ref", "fmha_ref"]


def _bounds(cu: torch.Tensor | None, total: int, batch: int) -> list[tuple[int, int, int]]:
    """(batch row, start, length) of every sequence along one axis."""
    if cu is None:
        return [(b, 0, total) for b in range(batch)]
    cu = [int(x) for x in cu.tolist()]
    return [(0, cu[n], cu[n + 1] - cu[n]) for n in range(len(cu) - 1)]


def fmha_ref(
    q: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    causal: bool = False,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    topk_indices: torch.Tensor | None = None,
    k_gather: torch.Tensor | None = None,
    v_gather: torch.Tensor | None = None,
    gather_lens: torch.Tensor | None = None,
    cu_seqlens_gather: torch.Tensor | None = None,
    partial: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 attention over a dense key set (k, v; optional) and/or a gathered key set (topk_indices into
    k_gather, v_gather; optional), both joined in one softmax with an optional per-head sink logit.

    Shapes: q `[B, T, HQ, D]`; k/k_gather `[B, S, HKV, D]`; v/v_gather `[B, S, HKV, DV]`; sinks `[HQ]`;
    kv_lens/gather_lens `[N]`; topk_indices `[B, T, TOPK]` (int). Returns o `[B, T, HQ, DV]` and lse `[B, T, HQ]`,
    both float64. `cu_seqlens_k` defaults to `cu_seqlens` and `cu_seqlens_gather` to `cu_seqlens_k`.
    """
    dense = k is not None
    gather = topk_indices is not None
    if not (dense or gather):
        raise ValueError("fmha_ref needs k/v (dense keys), topk_indices with k_gather/v_gather, or both")
    B, T, HQ, D = q.shape
    ref_v = v if dense else v_gather
    DV = ref_v.shape[-1]
    HKV = (k if dense else k_gather).shape[2]
    G = HQ // HKV
    scale = D**-0.5 if scale is None else scale
    dev = q.device
    f64 = torch.float64
    o = torch.zeros(B, T, HQ, DV, dtype=f64, device=dev)
    lse = torch.full((B, T, HQ), -math.inf, dtype=f64, device=dev)
    q_seqs = _bounds(cu_seqlens, T, B)
    cu_k = cu_seqlens if cu_seqlens_k is None else cu_seqlens_k
    k_seqs = _bounds(cu_k, k.shape[1], B) if dense else None
    cu_g = cu_k if cu_seqlens_gather is None else cu_seqlens_gather
    g_seqs = _bounds(cu_g, k_gather.shape[1], B) if gather else None
    for n, (b, t0, tn) in enumerate(q_seqs):
        qn = q[b, t0 : t0 + tn].to(f64).reshape(tn, HKV, G, D)
        scores, values = [], []
        if dense:
            _, s0, sn = k_seqs[n]
            ln = sn if kv_lens is None else int(kv_lens[n])
            kn = k[b, s0 : s0 + ln].to(f64)
            vn = v[b, s0 : s0 + ln].to(f64)
            s = scale * torch.einsum("tkgd,skd->tkgs", qn, kn)
            pos = torch.arange(tn, device=dev)[:, None] + (ln - tn)
            key = torch.arange(ln, device=dev)[None, :]
            allowed = torch.ones(tn, ln, dtype=torch.bool, device=dev)
            if causal:
                allowed &= key <= pos
            if window is not None:
                allowed &= key > pos - window
            scores.append(s.masked_fill(~allowed[:, None, None, :], -math.inf))
            values.append(("dense", vn))
        if gather:
            _, c0, cn = g_seqs[n]
            ln = cn if gather_lens is None else int(gather_lens[n])
            idx = topk_indices[b, t0 : t0 + tn].long()
            empty = idx < 0
            if bool(((idx >= ln) | (idx < -1)).any()):
                raise ValueError("topk_indices holds an index outside [-1, valid length)")
            rows = c0 + idx.clamp(min=0)
            kg = k_gather[b].to(f64)[rows]
            vg = v_gather[b].to(f64)[rows]
            s = scale * torch.einsum("tkgd,tikd->tkgi", qn, kg)
            scores.append(s.masked_fill(empty[:, None, None, :], -math.inf))
            values.append(("gather", vg))
        logits = torch.cat(scores, dim=-1)
        if sinks is not None and not partial:
            sink = sinks.to(f64).reshape(1, HKV, G, 1).expand(tn, HKV, G, 1)
            norm = torch.logsumexp(torch.cat([logits, sink], dim=-1), dim=-1)
        else:
            norm = torch.logsumexp(logits, dim=-1)
        safe = torch.where(torch.isfinite(norm), norm, torch.zeros_like(norm))
        p = torch.exp(logits - safe[..., None])
        out = torch.zeros(tn, HKV, G, DV, dtype=f64, device=dev)
        col = 0
        for kind, val in values:
            width = val.shape[0] if kind == "dense" else val.shape[1]
            pk = p[..., col : col + width]
            col += width
            if kind == "dense":
                out += torch.einsum("tkgs,skv->tkgv", pk, val)
            else:
                out += torch.einsum("tkgi,tikv->tkgv", pk, val)
        o[b, t0 : t0 + tn] = out.reshape(tn, HQ, DV)
        lse[b, t0 : t0 + tn] = norm.reshape(tn, HQ)
    return o, lse


def fmha_merge_ref(
    o1: torch.Tensor,
    lse1: torch.Tensor,
    o2: torch.Tensor,
    lse2: torch.Tensor,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 merge of two partial results: `o = (e^l1 o1 + e^l2 o2) / (e^l1 + e^l2 + e^sink_h)`.

    Shapes: o1, o2 `[B, T, HQ, DV]`; lse1, lse2 `[B, T, HQ]` (natural log, -inf for an empty branch); sinks `[HQ]`
    or None. Returns o `[B, T, HQ, DV]` and lse `[B, T, HQ]`, float64; rows with nothing at all give o = 0, -inf.
    """
    f64 = torch.float64
    parts = [lse1.to(f64), lse2.to(f64)]
    if sinks is not None:
        parts.append(sinks.to(f64).expand_as(parts[0]))
    lse = torch.logsumexp(torch.stack(parts), dim=0)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    o = torch.zeros(o1.shape, dtype=f64, device=o1.device)
    for oi, li in ((o1, parts[0]), (o2, parts[1])):
        w = torch.exp(li - safe)[..., None]
        o += torch.where(w > 0, w * oi.to(f64), torch.zeros((), dtype=f64, device=o1.device))
    return o, lse
