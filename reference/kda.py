"""fp64 PyTorch oracle for KDA (Kimi Delta Attention), following /work/shared/KDA_SPEC.md.

Every function upcasts its float inputs to fp64 on their own device and returns fp64. All ops are differentiable and
nothing is written in place, so `torch.autograd` (and `gradcheck`) work through every entry point.

Two forms of the same computation:
- `kda_recurrent`: the token-by-token recurrence, the ground truth (vectorised over sequences and heads, loops over
  time only).
- `kda_chunk`: the chunked (WY) form the fast kernels use, returning every intermediate so each kernel stage can be
  checked on its own.

Both accept the keyword arguments of `chunk_kda` verbatim; arguments that only steer the fast kernels
(`safe_gate`, `disable_recompute`, `cu_seqlens_cpu`, ...) are accepted and ignored.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "KDAChunkResult",
    "kda_beta_ref",
    "kda_chunk",
    "kda_gate_ref",
    "kda_gate_terms",
    "kda_recurrent",
    "kda_recurrent_gated",
    "l2norm_ref",
]

F64 = torch.float64


def l2norm_ref(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """`x / sqrt(sum(x^2, -1) + eps)` in fp64. x: any shape `[..., D]`, any float dtype; returns fp64, same shape."""
    x = x.to(F64)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_gate_ref(
    g: torch.Tensor,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float | None = None,
) -> torch.Tensor:
    """The in-kernel gate activation: raw gate input -> per-step log-decay (natural log, <= 0), fp64.

    g: `[..., HV, K]` raw gate input. A_log: `HV` elements. dt_bias: `HV * K` elements (viewed as `[HV, K]`), optional.
    - lower_bound is None: `-exp(A_log[h]) * softplus(g + dt_bias[h])` (A_log required).
    - lower_bound set: `lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias[h]))`, or
      `lower_bound * sigmoid(g + dt_bias[h])` when A_log is None.
    Returns fp64 with the shape of g.
    """
    if g.dim() < 2:
        raise ValueError(f"kda_gate_ref: `g` must be [..., HV, K], got shape {tuple(g.shape)}")
    HV, K = g.shape[-2:]
    x = g.to(F64)
    if dt_bias is not None:
        if dt_bias.numel() != HV * K:
            raise ValueError(
                f"kda_gate_ref: `dt_bias` has shape {tuple(dt_bias.shape)} ({dt_bias.numel()} elements), "
                f"expected HV * K = {HV} * {K} = {HV * K} elements"
            )
        x = x + dt_bias.to(F64).reshape(HV, K)
    if A_log is not None and A_log.numel() != HV:
        raise ValueError(
            f"kda_gate_ref: `A_log` has shape {tuple(A_log.shape)} ({A_log.numel()} elements), expected HV = {HV}"
        )
    if lower_bound is None:
        if A_log is None:
            raise ValueError("kda_gate_ref: `A_log` is required when `lower_bound` is None (got A_log=None)")
        # softplus(x) = log(exp(x) + exp(0)), exact and overflow-free for every x
        return -torch.exp(A_log.to(F64)).reshape(HV, 1) * torch.logaddexp(x, torch.zeros_like(x))
    if A_log is not None:
        x = torch.exp(A_log.to(F64)).reshape(HV, 1) * x
    return lower_bound * torch.sigmoid(x)


def kda_gate_terms(
    dgate: torch.Tensor,
    g: torch.Tensor,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float | None = None,
) -> dict[str, torch.Tensor]:
    """The sums of |terms| of the gate parameters' gradients, each shaped like its parameter, fp64.

    dgate: `[..., HV, K]` gradient of the activated gate (`kda_gate_ref`'s output); g, A_log, dt_bias, lower_bound as
    there. dA_log[h] sums dgate * d gate / d A_log[h] over every element of head h, ddt_bias[h, k] sums
    dgate * d gate / d dt_bias[h, k] over tokens: {"A_log": sum of |those terms| per head, "dt_bias": per (h, k)}, for
    the parameters given. A sum of n terms computed with relative error e per term is off by at most e times this
    (and by about e / sqrt(n) times it for independent errors), however much the terms cancel.
    """
    HV, K = g.shape[-2:]
    params = {"A_log": A_log, "dt_bias": dt_bias}
    out = {}
    for name, p in params.items():
        if p is None:
            continue
        x = p.detach().to(F64)

        def gate_of(y: torch.Tensor, name=name) -> torch.Tensor:
            return kda_gate_ref(g.detach(), **{**params, name: y}, lower_bound=lower_bound)

        # every element of the gate depends on one element of the parameter: a JVP with ones gives d gate / d p
        _, dp = torch.func.jvp(gate_of, (x,), (torch.ones_like(x),))
        terms = (dgate.detach().to(F64) * dp).abs().reshape(-1, HV, K)
        out[name] = (terms.sum((0, 2)) if name == "A_log" else terms.sum(0)).reshape(p.shape)
    return out


def kda_beta_ref(beta: torch.Tensor, allow_neg_eigval: bool = False) -> torch.Tensor:
    """The in-kernel beta activation: `sigmoid(beta)`, times 2 when allow_neg_eigval. Any shape; returns fp64."""
    b = torch.sigmoid(beta.to(F64))
    return 2 * b if allow_neg_eigval else b


class KDAChunkResult(NamedTuple):
    """Everything `kda_chunk` computes, fp64. `TT` = total tokens laid end to end (B * T, or T with cu_seqlens),
    `NT` = total chunks (each sequence of length L has ceil(L / BT) chunks, restarting at every sequence start).

    o: `[B, T, HV, V]`. final_state: `[N, HV, K, V]` (`[N, HV, V, K]` if state_v_first) or None.
    g_cumsum: `[TT, HV, K]` inclusive in-chunk cumsum of the activated gate (natural log).
    Aqk: `[TT, HV, BT]` row i of `scale * (q_i * k_j * exp(G_i - G_j)).sum()` for j <= i, else 0.
    Akk: `[TT, HV, BT]` row i of `(I + L)^-1`, `L[i, j] = beta_i * (k_i * k_j * exp(G_i - G_j)).sum()` for i > j.
    w: `[TT, HV, K]` = Akk (beta * k * exp(G)). u: `[TT, HV, V]` = Akk (beta * v).
    h: `[NT, HV, K, V]` state at the start of each chunk, always K-first. v_new: `[TT, HV, V]` = u - w h.
    """

    o: torch.Tensor
    final_state: torch.Tensor | None
    g_cumsum: torch.Tensor
    Aqk: torch.Tensor
    Akk: torch.Tensor
    w: torch.Tensor
    u: torch.Tensor
    h: torch.Tensor
    v_new: torch.Tensor


class _Packed(NamedTuple):
    """Activated fp64 inputs, one row per sequence, padded at the end to a common length Lp.

    q, k: `[N, Lp, HV, K]` (GVA-expanded, q already times scale); v: `[N, Lp, HV, V]`; g: `[N, Lp, HV, K]` log-decay;
    beta: `[N, Lp, HV]`; h0: `[N, HV, K, V]` K-first; valid: `[N, Lp]` bool. Padded steps carry q = k = v = beta = 0
    and g = 0, so they leave the state unchanged exactly and produce zero output.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    h0: torch.Tensor
    valid: torch.Tensor
    scale: float


def _seq_lengths(fn: str, B: int, T: int, cu_seqlens: torch.Tensor | None) -> list[int]:
    if cu_seqlens is None:
        return [T] * B
    if B != 1:
        raise ValueError(f"{fn}: with `cu_seqlens` the batch size must be 1, got q.shape[0] = {B}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"{fn}: `cu_seqlens` must be a 1-D int32/int64 tensor [N + 1], got shape {tuple(cu_seqlens.shape)} "
            f"dtype {cu_seqlens.dtype}"
        )
    cu = cu_seqlens.tolist()
    lengths = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    if cu[0] != 0 or cu[-1] != T or any(n < 0 for n in lengths):
        raise ValueError(f"{fn}: `cu_seqlens` must start at 0, be non-decreasing and end at T = {T}, got {cu}")
    return lengths


def _pack(
    fn: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None,
    initial_state: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool,
    allow_neg_eigval: bool,
    lower_bound: float | None,
    state_v_first: bool,
    cu_seqlens: torch.Tensor | None,
    A_log: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    multiple: int,
) -> _Packed:
    """Check shapes, apply the in-kernel activations and lay sequences out as padded rows (length a multiple of
    `multiple`)."""
    if q.dim() != 4:
        raise ValueError(f"{fn}: `q` must be [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    if k.shape != q.shape:
        raise ValueError(f"{fn}: `k` has shape {tuple(k.shape)}, expected the shape of q {tuple(q.shape)}")
    if v.dim() != 4 or v.shape[:2] != (B, T):
        raise ValueError(f"{fn}: `v` must be [B, T, HV, V] = [{B}, {T}, HV, V], got shape {tuple(v.shape)}")
    HV, V = v.shape[2:]
    if H == 0 or HV % H != 0:
        raise ValueError(f"{fn}: v heads HV = {HV} must be a positive multiple of q/k heads H = {H}")
    if g.shape != (B, T, HV, K):
        raise ValueError(f"{fn}: `g` has shape {tuple(g.shape)}, expected [B, T, HV, K] = {(B, T, HV, K)}")
    if beta.shape != (B, T, HV):
        raise ValueError(f"{fn}: `beta` has shape {tuple(beta.shape)}, expected [B, T, HV] = {(B, T, HV)}")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError(f"{fn}: `allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`")
    lengths = _seq_lengths(fn, B, T, cu_seqlens)
    N = len(lengths)
    if initial_state is not None:
        expected = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        if initial_state.shape != expected:
            layout = "[N, HV, V, K]" if state_v_first else "[N, HV, K, V]"
            raise ValueError(
                f"{fn}: `initial_state` has shape {tuple(initial_state.shape)}, expected {layout} = {expected}"
            )

    scale = K**-0.5 if scale is None else scale
    if use_qk_l2norm_in_kernel:
        q, k = l2norm_ref(q), l2norm_ref(k)
    q = q.to(F64) * scale
    k = k.to(F64)
    gate = kda_gate_ref(g, A_log, dt_bias, lower_bound) if use_gate_in_kernel else g.to(F64)
    b = kda_beta_ref(beta, allow_neg_eigval) if use_beta_sigmoid_in_kernel else beta.to(F64)

    device = q.device
    Lp = -(-max(lengths, default=0) // multiple) * multiple
    lens = torch.tensor(lengths, dtype=torch.int64, device=device)
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(Lp, dtype=torch.int64, device=device)
    valid = pos[None, :] < lens[:, None]
    index = torch.where(valid, starts[:, None] + pos[None, :], 0)

    def rows(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(B * T, *x.shape[2:])
        picked = flat[index] if flat.shape[0] else flat.new_zeros(N, Lp, *flat.shape[1:])
        mask = valid.reshape(N, Lp, *([1] * (flat.dim() - 1)))
        return torch.where(mask, picked, torch.zeros((), dtype=F64, device=device))

    G = HV // H
    h0 = torch.zeros(N, HV, K, V, dtype=F64, device=device)
    if initial_state is not None:
        h0 = initial_state.to(F64)
        if state_v_first:
            h0 = h0.transpose(-1, -2)
    return _Packed(
        q=rows(q.repeat_interleave(G, dim=2)),
        k=rows(k.repeat_interleave(G, dim=2)),
        v=rows(v.to(F64)),
        g=rows(gate),
        beta=rows(b),
        h0=h0,
        valid=valid,
        scale=scale,
    )


def _final(S: torch.Tensor, output_final_state: bool, state_v_first: bool) -> torch.Tensor | None:
    if not output_final_state:
        return None
    return S.transpose(-1, -2) if state_v_first else S


def kda_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: float | None = None,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    **ignored,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """KDA by its token-by-token recurrence, in fp64: the ground truth.

    q, k: `[B, T, H, K]`; v: `[B, T, HV, V]`; g: `[B, T, HV, K]` log-decay (raw gate input if use_gate_in_kernel);
    beta: `[B, T, HV]` (logits if use_beta_sigmoid_in_kernel); initial_state: `[N, HV, K, V]` (`[N, HV, V, K]` if
    state_v_first); cu_seqlens: `[N + 1]` int (then B == 1); A_log: `HV` elements; dt_bias: `HV * K` elements.
    Any float dtypes. Per sequence and v-head hv (reading q/k head hv // (HV // H)):
    `S_t = diag(exp(g_t)) S_{t-1};  S_t += beta_t k_t (v_t - k_t^T S_t)^T;  o_t = scale * S_t^T q_t`.
    Returns `(o, final_state)`: o `[B, T, HV, V]` fp64; final_state fp64 in the layout of initial_state, or None
    when output_final_state is False. Other chunk_kda keyword arguments are accepted and ignored.
    """
    p = _pack(
        "kda_recurrent", q, k, v, g, beta, scale=scale, initial_state=initial_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        lower_bound=lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens, A_log=A_log, dt_bias=dt_bias,
        multiple=1,
    )
    S = p.h0
    outs = []
    for t in range(p.valid.shape[1]):
        k_t = p.k[:, t]
        S = torch.exp(p.g[:, t]).unsqueeze(-1) * S
        pred = torch.einsum("nhk,nhkv->nhv", k_t, S)
        S = S + torch.einsum("nhk,nhv->nhkv", p.beta[:, t, :, None] * k_t, p.v[:, t] - pred)
        outs.append(torch.einsum("nhk,nhkv->nhv", p.q[:, t], S))
    B, T, HV, V = v.shape
    o = torch.stack(outs, 1)[p.valid] if outs else p.v.new_zeros(0, HV, V)
    return o.reshape(B, T, HV, V), _final(S, output_final_state, state_v_first)


def kda_recurrent_gated(**kwargs) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`kda_recurrent(**kwargs)` with the in-kernel gate activated outside the recurrence (by the same
    `kda_gate_ref`): (o, final_state, gate), gate the activated log-decay `[B, T, HV, K]` fp64 in the autograd graph
    (its gradient is dgate, what `kda_gate_terms` takes), or None without use_gate_in_kernel."""
    if not kwargs.get("use_gate_in_kernel"):
        return (*kda_recurrent(**kwargs), None)
    gate = kda_gate_ref(kwargs["g"], kwargs.get("A_log"), kwargs.get("dt_bias"), kwargs.get("lower_bound"))
    return (*kda_recurrent(**{**kwargs, "g": gate, "use_gate_in_kernel": False}), gate)


def kda_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: float | None = None,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    chunk_size: int = 64,
    **ignored,
) -> KDAChunkResult:
    """KDA by the chunked (WY) formulas of KDA_SPEC.md, in fp64, returning every intermediate (see KDAChunkResult).

    Same arguments and shapes as `kda_recurrent`, plus chunk_size (BT, any positive int). Fixed-length input is
    treated as B sequences of length T laid end to end; chunks restart at every sequence start. Decays enter only as
    `exp` of differences of in-chunk cumsums taken in the causal direction (never a division).
    """
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"kda_chunk: `chunk_size` must be a positive int, got {chunk_size!r}")
    BT = chunk_size
    p = _pack(
        "kda_chunk", q, k, v, g, beta, scale=scale, initial_state=initial_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        lower_bound=lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens, A_log=A_log, dt_bias=dt_bias,
        multiple=BT,
    )
    N, Lp = p.valid.shape
    NC = Lp // BT
    HV, K, V = p.k.shape[2], p.k.shape[3], p.v.shape[3]

    def chunks(x: torch.Tensor) -> torch.Tensor:
        """[N, Lp, HV, ...] -> [N, NC, HV, BT, ...]"""
        return x.reshape(N, NC, BT, *x.shape[2:]).transpose(2, 3)

    def tokens(x: torch.Tensor) -> torch.Tensor:
        """[N, NC, HV, BT, ...] -> [TT, HV, ...] (real tokens only, in sequence order)"""
        return x.transpose(2, 3).reshape(N, Lp, *x.shape[2:3], *x.shape[4:])[p.valid]

    q_c, k_c, v_c, b_c = chunks(p.q), chunks(p.k), chunks(p.v), chunks(p.beta)
    Gam = chunks(p.g).cumsum(-2)  # [N, NC, HV, BT, K]

    i_idx = torch.arange(BT, device=p.q.device)
    Aqk_cols, L_cols = [], []
    for j in range(BT):
        causal = (i_idx >= j)[:, None]  # rows i >= j of column j
        decay = torch.exp(torch.where(causal, Gam - Gam[..., j : j + 1, :], 0.0)) * causal
        kd = k_c[..., j : j + 1, :] * decay  # k_j * exp(G_i - G_j) for i >= j, 0 above
        Aqk_cols.append((q_c * kd).sum(-1))
        L_cols.append((k_c * kd).sum(-1) * (i_idx > j))
    Aqk = torch.stack(Aqk_cols, -1)  # scale is already in q
    L = b_c.unsqueeze(-1) * torch.stack(L_cols, -1)
    eye = torch.eye(BT, dtype=F64, device=p.q.device)
    Akk = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False, unitriangular=True)
    bk = b_c.unsqueeze(-1)
    w = Akk @ (bk * k_c * torch.exp(Gam))
    u = Akk @ (bk * v_c)

    S = p.h0
    hs, v_news, outs = [], [], []
    for c in range(NC):
        hs.append(S)
        v_new = u[:, c] - w[:, c] @ S
        outs.append((q_c[:, c] * torch.exp(Gam[:, c])) @ S + Aqk[:, c] @ v_new)
        v_news.append(v_new)
        G_last = Gam[:, c, :, -1:, :]  # padded steps have g = 0, so the last row is the last real token's cumsum
        k_last = k_c[:, c] * torch.exp(G_last - Gam[:, c])
        S = torch.exp(G_last).transpose(-1, -2) * S + k_last.transpose(-1, -2) @ v_new

    B, T = v.shape[:2]
    chunk_valid = (torch.arange(NC, device=p.q.device) * BT)[None, :] < p.valid.sum(1, keepdim=True)
    if NC:
        o = tokens(torch.stack(outs, 1))
        h = torch.stack(hs, 1)[chunk_valid]
        v_new = tokens(torch.stack(v_news, 1))
    else:
        o, v_new = p.v.new_zeros(0, HV, V), p.v.new_zeros(0, HV, V)
        h = p.v.new_zeros(0, HV, K, V)
    return KDAChunkResult(
        o=o.reshape(B, T, HV, V),
        final_state=_final(S, output_final_state, state_v_first),
        g_cumsum=tokens(Gam),
        Aqk=tokens(Aqk),
        Akk=tokens(Akk),
        w=tokens(w),
        u=tokens(u),
        h=h,
        v_new=v_new,
    )
