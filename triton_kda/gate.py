"""Gate stage: the in-kernel gate activations and their derivatives (Triton device functions), the gate cumsum of each
chunk (forward kernel, also recomputed in the backward) and the gate backward (from the gradient of the cumsum to the
raw gate, A_log and dt_bias).

    GATE == 0: gate = g                                            (pre-computed log decay)
    GATE == 1: gate = -a * softplus(g + dt_bias),  a = exp(A_log)  (softplus form)
    GATE == 2: gate = lb * sigmoid(a * (g + dt_bias))              (lower-bound form; a = 1 without A_log)
"""
import torch
import triton
import triton.language as tl

from triton_kda._jit import LOG2E, _chunk_coords, _chunk_rows
from triton_kda.configs import arch_of, cdiv, gate_bwd_config, gate_cumsum_config
from triton_kda.launch import launch_kernel

GATE_NONE = 0
GATE_SOFTPLUS = 1
GATE_LOWER_BOUND = 2


def gate_mode(use_gate_in_kernel: bool, lower_bound: float | None) -> int:
    """The GATE constexpr for a call (fla selects the lower-bound form by `lower_bound is not None` alone)."""
    if not use_gate_in_kernel:
        return GATE_NONE
    return GATE_SOFTPLUS if lower_bound is None else GATE_LOWER_BOUND


@triton.jit
def _softplus(x):
    # log(1 + e^x) without overflow (for x > 20 the correction is below fp32 resolution) and accurate where e^x is
    # tiny: log1p(y) = log(u) * y / (u - 1), u = 1 + y (y itself where u rounds to 1), whereas log(1 + y) keeps only
    # y's part above fp32 resolution of 1 (1e-3 relative error at x = -10, up to 1e-6 on decays exp(-a softplus))
    y = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + y
    log1p = tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
    return tl.where(x > 20.0, x, log1p)


@triton.jit
def kda_gate_act(x, a, lower_bound, GATE: tl.constexpr):
    """Activated log-decay from the biased raw gate x (fp32); a = exp(A_log[h]) (or 1)."""
    if GATE == 1:
        y = -a * _softplus(x)
    else:
        y = lower_bound * tl.sigmoid(a * x)
    return y


@triton.jit
def kda_gate_act_bwd(x, a, lower_bound, dy, GATE: tl.constexpr):
    """Returns (dx, da_partial) for y = kda_gate_act(x, a): dx = dy * dy/dx, da_partial = dy * dy/da (per element)."""
    if GATE == 1:
        sp = _softplus(x)
        dx = -a * tl.sigmoid(x) * dy
        da = -sp * dy
    else:
        s = tl.sigmoid(a * x)
        ds = lower_bound * s * (1.0 - s) * dy
        dx = ds * a
        da = ds * x
    return dx, da


@triton.jit
def _gate_tile(g, bos, T, t0, i_hv, i_k, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """The chunk's raw gate [BT, BK] for K slice i_k, as stored (zero past the sequence end and past K)."""
    p_g = tl.make_block_ptr(g + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    return tl.load(p_g, boundary_check=(0, 1))


@triton.jit
def _gate_input_of(b_g, A_log, dt_bias, i_hv, i_k, K: tl.constexpr, BK: tl.constexpr, HAS_A_LOG: tl.constexpr,
                   HAS_DT_BIAS: tl.constexpr):
    """(x, a) from the raw gate tile b_g of K slice i_k ([BT, BK], or one row [BK]): x = b_g + dt_bias fp32 and
    a = exp(A_log[i_hv]) (1 without A_log): the arguments of `kda_gate_act` and `kda_gate_act_bwd`."""
    b_x = b_g.to(tl.float32)
    if HAS_DT_BIAS:
        o_k = i_k * BK + tl.arange(0, BK)
        b_x += tl.load(dt_bias + i_hv * K + o_k, mask=o_k < K, other=0.0).to(tl.float32)
    if HAS_A_LOG:
        a = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    else:
        a = 1.0
    return b_x, a


@triton.jit
def _gate_cumsum_of(b_g, A_log, dt_bias, i_hv, i_k, lower_bound, m_t, K: tl.constexpr, BK: tl.constexpr,
                    GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr, EXACT_SCAN: tl.constexpr):
    """Inclusive in-chunk cumsum (log2 units) of the activated gate from the raw gate tile b_g of K slice i_k:
    [BT, BK], zero past the sequence end and past K (so the last row holds the last valid token's value); fp32, or
    fp64 with EXACT_SCAN.

    EXACT_SCAN (fp32 inputs) sums and scales in fp64 and returns G in fp64, each G_i exact to fp64's rounding. The
    forward kernels round it to fp32 once; the gate cumsum the backward reads (`gate_cumsum`) keeps it as an fp32
    pair (hi, lo), and the chunk-local backward takes the exponent of each decay 2^(G_i - G_j) from the pairs
    (`_gate_diff`), right to about an ulp of |G_i - G_j| rather than of |G|. G rounded to fp32 there put an ulp of |G|
    into every exponent: at |G| of 100-300 log2 units (strong decays late in a chunk) 1e-5 relative error in each
    decay, which the gate gradient of a strongly decaying row, a sum of decayed terms with no undecayed one, keeps in
    full (2026-11-28, interpreter, K = V = 32, T64, two seeds, docs/benchmarks/runs/2026-11-28_dalog/g_rounding.py: fp32
    dg of the unsaturated lower-bound regime 3.6e-6 / 4.3e-6 with G in fp32, 5.0e-7 / 6.1e-7 with fp64 G in the
    backward before the span kernel's diagonal change, and 4.6e-6 / 5.3e-6 from fp32 G alone in the fp64 oracle). fp64
    G in the forward kernels as well cost the H200 fp32 fwd+bwd at B2 T8192 H32 x1.12 (an uncommitted variant,
    docs/benchmarks/runs/2026-11-28_dalog, call 1). An fp32 tl.cumsum on a GPU adds in a tree that follows the tile's
    layout, so nearby prefix sums carry independent errors of several ulps besides
    (2026-11-22 at 7bc5e02: dk 3.3e-5 with the strong-decay gate on an H200, where the interpreter's sequential fp32
    sum passes).
    """
    m_k = i_k * BK + tl.arange(0, BK) < K
    b_x, a = _gate_input_of(b_g, A_log, dt_bias, i_hv, i_k, K, BK, HAS_A_LOG, HAS_DT_BIAS)
    if GATE > 0:
        b_x = kda_gate_act(b_x, a, lower_bound, GATE)
    b_x = tl.where(m_t[:, None] & m_k[None, :], b_x, 0.0)
    if EXACT_SCAN:
        b_G = tl.cumsum(b_x.to(tl.float64), axis=0) * LOG2E
    else:
        b_G = tl.cumsum(b_x, axis=0) * LOG2E
    return b_G


@triton.jit
def _gate_diff(hi_x, lo_x, hi_y, lo_y, PAIR: tl.constexpr):
    """G_x - G_y in fp32 from gate cumsums held as fp32 pairs G = hi + lo (`gate_cumsum`): the his' difference is exact
    where they are within a factor 2 of each other (Sterbenz) and otherwise rounded at its own magnitude, the los'
    difference restores what rounding G to hi dropped. Without PAIR, hi_x - hi_y (lo_x, lo_y unused)."""
    if PAIR:
        return (hi_x - hi_y) + (lo_x - lo_y)
    else:
        return hi_x - hi_y


@triton.jit
def _gate_lo(p_lo, b_hi, PAIR: tl.constexpr):
    """The lo tile of a gate-cumsum pair at block pointer p_lo; without PAIR, b_hi stands in (`_gate_diff` ignores
    it)."""
    if PAIR:
        return tl.load(p_lo, boundary_check=(0, 1))
    else:
        return b_hi


@triton.jit
def _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t,
                 HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr, EXACT_SCAN: tl.constexpr):
    """`_gate_cumsum_of` the chunk's gate tile of K slice i_k, loaded from g."""
    return _gate_cumsum_of(_gate_tile(g, bos, T, t0, i_hv, i_k, HV, K, BT, BK), A_log, dt_bias, i_hv, i_k,
                           lower_bound, m_t, K, BK, GATE, HAS_A_LOG, HAS_DT_BIAS, EXACT_SCAN)


@triton.jit
def _kda_gate_cumsum_fwd_kernel(
    g, A_log, dt_bias, Gc, Gc_lo, cu_seqlens, chunk_indices, lower_bound,
    HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr, PREC: tl.constexpr,
):
    """The gate cumsum G the backward reads, as the intra forward computes it: one program per (chunk, v-head, K slice).
        G_i = log2(e) sum_{j <= i in the chunk} gate_j
    g [TT, HV, K] (raw); writes Gc [TT, HV, K] fp32, under PREC "tf32x3" (fp32 inputs, `gate_cumsum_pair`) the fp64
    cumsum as an fp32 pair: Gc = hi = G rounded to fp32, Gc_lo [TT, HV, K] = G - hi rounded to fp32."""
    i_t, i_hv, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, t0, n_valid, o_t, m_t = _chunk_rows(cu_seqlens, chunk_indices, i_t, BT)
    b_G = _gate_cumsum(g, A_log, dt_bias, bos, T, t0, i_hv, i_k, lower_bound, m_t, HV, K, BT, BK, GATE, HAS_A_LOG,
                       HAS_DT_BIAS, PREC == "tf32x3")
    p_G = tl.make_block_ptr(Gc + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    b_hi = b_G.to(tl.float32)
    tl.store(p_G, b_hi, boundary_check=(0, 1))
    if PREC == "tf32x3":
        p_lo = tl.make_block_ptr(Gc_lo + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
        tl.store(p_lo, (b_G - b_hi.to(tl.float64)).to(tl.float32), boundary_check=(0, 1))


@triton.jit
def _kda_gate_bwd_kernel(
    g, A_log, dt_bias, dD, dW, dg, dA_log_part, ddt_bias_part,
    cu_seqlens, chunk_indices, lower_bound, NT,
    HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
    GATE: tl.constexpr, HAS_A_LOG: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
):
    """From the gradient of the gate cumsum to the raw gate: one program per (chunk, v-head, K slice).

    g [TT, HV, K] (raw). dgate_m, the gradient of G at row m of a chunk, sums only terms whose decay spans m (no
    cancellation under strong decay), in one of the chunk-local backward's two forms:
    - BC = 0 (`_kda_intra_bwd_kernel`): dD = E and dW = F, both [TT, HV, K] fp32;
          dgate_m = sum_{i >= m} E_i + sum_{j < m} F_j
    - BC > 0 (`_kda_intra_bwd_span_kernel`, blocks of BC rows, NC = BT / BC): dD [TT, HV, K] fp32 the part from the
      row's own block and dW [NT, NC + 1, NC + 1, HV, K] fp32 block sums; for row m in block p
          dgate_m = dD_m + sum_{r > p >= s} dW[r, s]   (r in 0..NC, s in 0..NC, skipping dW[NC, 0])
    then dg = dgate * d gate / d g. Writes dg [TT, HV, K] in g's dtype and, with the in-kernel gate, the per-chunk
    partials dA_log_part [NK, NT, HV] and ddt_bias_part [NT, HV, K] fp32."""
    i_t, i_hv, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, i_c = _chunk_coords(cu_seqlens, chunk_indices, i_t)
    t0 = i_c * BT
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    m_tk = (o_t < tl.minimum(T - t0, BT))[:, None] & m_k[None, :]
    p_dD = tl.make_block_ptr(dD + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    if BC > 0:
        NC: tl.constexpr = BT // BC
        b_dg = tl.load(p_dD, boundary_check=(0, 1))
        p_W = dW + (i_t * (NC + 1) * (NC + 1) * HV + i_hv).to(tl.int64) * K + o_k
        for p in tl.static_range(NC):
            b_o = tl.zeros((BK,), dtype=tl.float32)
            for r in tl.static_range(p + 1, NC + 1):
                for s in tl.static_range(0 if r < NC else 1, p + 1):
                    b_o += tl.load(p_W + (r * (NC + 1) + s) * HV * K, mask=m_k, other=0.0)
            b_dg += tl.where((o_t // BC == p)[:, None], b_o[None, :], 0.0)
    else:
        # F one row down (row m holds F_{m-1}): its inclusive cumsum is the exclusive one of F
        m_prev = (o_t >= 1)[:, None] & m_tk
        b_Fp = tl.load(dW + ((bos + t0 + o_t - 1).to(tl.int64) * HV + i_hv)[:, None] * K + o_k[None, :], mask=m_prev,
                       other=0.0)
        b_dg = tl.cumsum(tl.load(p_dD, boundary_check=(0, 1)), axis=0, reverse=True) + tl.cumsum(b_Fp, axis=0)
    b_dg = tl.where(m_tk, b_dg, 0.0)
    if GATE > 0:
        b_x, a = _gate_input_of(_gate_tile(g, bos, T, t0, i_hv, i_k, HV, K, BT, BK), A_log, dt_bias, i_hv, i_k, K,
                                BK, HAS_A_LOG, HAS_DT_BIAS)
        b_dg, b_da = kda_gate_act_bwd(b_x, a, lower_bound, b_dg, GATE)
        b_dg = tl.where(m_tk, b_dg, 0.0)
        if HAS_A_LOG:
            tl.store(dA_log_part + (i_k * NT + i_t) * HV + i_hv, tl.sum(tl.sum(tl.where(m_tk, b_da, 0.0), 1), 0) * a)
        if HAS_DT_BIAS:
            tl.store(ddt_bias_part + (i_t * HV + i_hv).to(tl.int64) * K + o_k, tl.sum(b_dg, axis=0), mask=m_k)
    p_dg = tl.make_block_ptr(dg + (bos * HV + i_hv) * K, (T, K), (HV * K, 1), (t0, i_k * BK), (BT, BK), (1, 0))
    tl.store(p_dg, b_dg.to(p_dg.dtype.element_ty), boundary_check=(0, 1))


def gate_cumsum_pair(prec: str) -> bool:
    """Whether the gate cumsum Gc of a forward of precision `prec` is an fp32 pair (hi, lo): under "tf32x3" (fp32
    inputs, whose kernels sum G in fp64, `_gate_cumsum_of`)."""
    return prec == "tf32x3"


def gate_cumsum(g, A_log, dt_bias, plan, BT: int, *, gate: int, lower_bound: float | None, prec: str) -> torch.Tensor:
    """Launch `_kda_gate_cumsum_fwd_kernel` on the (NT, HV, NK) grid: Gc [TT, HV, K] fp32, or [2, TT, HV, K] fp32 (hi,
    lo) where `gate_cumsum_pair(prec)`, from g [TT, HV, K] (raw, contiguous); A_log [HV] and dt_bias [HV * K] or None;
    gate: the GATE constexpr; prec: the forward's."""
    TT, HV, K = g.shape
    pair = gate_cumsum_pair(prec)
    cfg = gate_cumsum_config(arch_of(g.device), K, pair)
    has_a_log, has_dt_bias = gate > 0 and A_log is not None, gate > 0 and dt_bias is not None
    Gc = torch.empty(*((2,) if pair else ()), TT, HV, K, device=g.device, dtype=torch.float32)
    launch_kernel(_kda_gate_cumsum_fwd_kernel, (plan.NT, HV, cdiv(K, cfg.BK)),
        g, A_log if has_a_log else g, dt_bias if has_dt_bias else g, Gc[0] if pair else Gc, Gc[1] if pair else Gc,
        plan.cu_seqlens, plan.chunk_indices, lower_bound if lower_bound is not None else 0.0,
        HV=HV, K=K, BT=BT, BK=cfg.BK, GATE=gate, HAS_A_LOG=has_a_log, HAS_DT_BIAS=has_dt_bias, PREC=prec,
        num_warps=cfg.num_warps,
    )
    return Gc


def gate_bwd(g, A_log, dt_bias, dD, dW, plan, BT: int, BC: int, *, gate: int, lower_bound: float | None):
    """Launch `_kda_gate_bwd_kernel` on the (NT, HV, NK) grid: (dg, dA_log_part or None, ddt_bias_part or None);
    BC: the row blocks of the spanning form's dD / dW, 0 for the E-form (dD = E, dW = F)."""
    TT, HV, K = g.shape
    cfg = gate_bwd_config(arch_of(g.device), K)
    NK = cdiv(K, cfg.BK)
    f32 = dict(device=g.device, dtype=torch.float32)
    has_a_log, has_dt_bias = gate > 0 and A_log is not None, gate > 0 and dt_bias is not None
    dg = torch.empty_like(g)
    dA_log_part = torch.empty(NK, plan.NT, HV, **f32) if has_a_log else None
    ddt_bias_part = torch.empty(plan.NT, HV, K, **f32) if has_dt_bias else None
    launch_kernel(_kda_gate_bwd_kernel, (plan.NT, HV, NK),
        g, A_log if has_a_log else g, dt_bias if has_dt_bias else g, dD, dW, dg,
        dA_log_part if has_a_log else dD, ddt_bias_part if has_dt_bias else dD,
        plan.cu_seqlens, plan.chunk_indices, lower_bound if lower_bound is not None else 0.0, plan.NT,
        HV=HV, K=K, BT=BT, BK=cfg.BK, BC=BC, GATE=gate, HAS_A_LOG=has_a_log, HAS_DT_BIAS=has_dt_bias,
        num_warps=cfg.num_warps,
    )
    return dg, dA_log_part, ddt_bias_part
