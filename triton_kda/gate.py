"""Gate stage: the in-kernel gate activations and their derivatives, as Triton device functions.

Used inside the fused intra-chunk kernels (forward and backward); the cumsum over a chunk is done there.

    GATE == 0: gate = g                                            (pre-computed log decay)
    GATE == 1: gate = -a * softplus(g + dt_bias),  a = exp(A_log)  (softplus form)
    GATE == 2: gate = lb * sigmoid(a * (g + dt_bias))              (lower-bound form; a = 1 without A_log)
"""
import triton
import triton.language as tl

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
