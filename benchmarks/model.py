"""The bytes/FLOPs model of chunk_kda: one estimate per (shape, mode), and the roofline arithmetic on it.

Notation: N_tok = B * T tokens, each with H q/k heads and HV v heads; e = bytes per element of the input dtype
(bf16/fp16 2, fp32 4); states are fp32 ``[N, HV, K, V]``.

Forward (mode ``"fwd"``), the fewest bytes that must move: every input read once, the output written once.
    bytes = N_tok * (2*H*K + HV*V + HV*K + HV) * e        q, k, v, g, beta
          + N_tok * HV * V * e                            o
          + N * HV * K * V * 4  per state read or written (initial_state, final_state)
    FLOPs = N_tok * HV * (3 * 2*K*V + 2*BT*(3*K + 2*V))
The state terms (w S, (q * exp(Gam)) S, and the update kg^T v_new) cost 2*K*V each per token-head whatever the
chunk size; the intra-chunk terms (Akk, Aqk, w, u and Aqk v_new, one chunk of BT columns each) add 2*BT*(3K + 2V).
Element-wise work (gates, l2norm, exponentials) and A_log/dt_bias (a few KB) are left out.

Forward + backward (mode ``"fwdbwd"``): an estimate, documented here so the reports can be read against it.
    FLOPs = 3 * forward FLOPs: each matrix product of the forward has two in the backward (one per operand);
          recomputing forward intermediates inside the backward is implementation overhead and is not counted.
    bytes = forward bytes
          + inputs read again by the backward (q, k, v, g, beta) + do read (size of o)
          + gradients written (dq, dk, dv, dg, dbeta: the size of the inputs)
          + one state-sized tensor per state (dht read with a final state, dh0 written with an initial state).
"""
from __future__ import annotations

from typing import NamedTuple

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
STATE_BYTES = 4
MODES = ("fwd", "fwdbwd")


class Cost(NamedTuple):
    """Bytes that must move through device memory and FLOPs of one call."""

    bytes: int
    flops: int


def input_bytes(tokens: int, H: int, HV: int, K: int, V: int, elem: int) -> int:
    """Bytes of q, k ``[.., H, K]``, v ``[.., HV, V]``, g ``[.., HV, K]`` and beta ``[.., HV]`` over ``tokens``."""
    return tokens * (2 * H * K + HV * V + HV * K + HV) * elem


def output_bytes(tokens: int, HV: int, V: int, elem: int) -> int:
    """Bytes of o ``[.., HV, V]`` over ``tokens``."""
    return tokens * HV * V * elem


def state_bytes(n_seqs: int, HV: int, K: int, V: int) -> int:
    """Bytes of one fp32 state tensor ``[N, HV, K, V]``."""
    return n_seqs * HV * K * V * STATE_BYTES


def forward_flops_per_token_head(K: int, V: int, chunk_size: int = 64) -> int:
    """State terms 3 x 2KV plus intra-chunk terms 2*BT*(3K + 2V)."""
    return 3 * 2 * K * V + 2 * chunk_size * (3 * K + 2 * V)


def cost(shape, mode: str, *, chunk_size: int = 64, initial_state: bool = False,
         final_state: bool = False) -> Cost:
    """Bytes and FLOPs of one call on ``shape`` (any object with B, T, H, HV, K, V, dtype, n_seqs) in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if shape.dtype not in DTYPE_BYTES:
        raise ValueError(f"shape.dtype must be one of {tuple(DTYPE_BYTES)}, got {shape.dtype!r}")
    elem = DTYPE_BYTES[shape.dtype]
    tokens = shape.B * shape.T
    ins = input_bytes(tokens, shape.H, shape.HV, shape.K, shape.V, elem)
    out = output_bytes(tokens, shape.HV, shape.V, elem)
    states = (int(initial_state) + int(final_state)) * state_bytes(shape.n_seqs, shape.HV, shape.K, shape.V)
    fwd_bytes = ins + out + states
    fwd_flops = tokens * shape.HV * forward_flops_per_token_head(shape.K, shape.V, chunk_size)
    if mode == "fwd":
        return Cost(fwd_bytes, fwd_flops)
    return Cost(fwd_bytes + 2 * ins + out + states, 3 * fwd_flops)


class Roofline(NamedTuple):
    """Achieved rates of one timing and how they compare with the machine's measured ceilings.

    Fields are None where the ceilings are unknown (``pct_*`` and ``floor_ms``).
    """

    tbps: float
    tflops: float
    pct_bw: float | None
    pct_mma: float | None
    floor_ms: float | None
    pct_of_floor: float | None


def roofline(c: Cost, ms: float, copy_tbps: float | None = None, matmul_tflops: float | None = None) -> Roofline:
    """Achieved TB/s and TFLOP/s of ``c`` done in ``ms`` milliseconds, as % of the ceilings when known.

    ``floor_ms`` is the roofline floor max(bytes / copy bandwidth, FLOPs / matmul rate); ``pct_of_floor`` is
    floor_ms / ms in percent (100 = at the floor).
    """
    if not ms > 0:
        raise ValueError(f"ms must be positive, got {ms!r}")
    seconds = ms * 1e-3
    tbps = c.bytes / seconds / 1e12
    tflops = c.flops / seconds / 1e12
    if copy_tbps is None or matmul_tflops is None:
        return Roofline(tbps, tflops, None, None, None, None)
    floor_ms = max(c.bytes / (copy_tbps * 1e12), c.flops / (matmul_tflops * 1e12)) * 1e3
    return Roofline(tbps, tflops, 100 * tbps / copy_tbps, 100 * tflops / matmul_tflops, floor_ms,
                    100 * floor_ms / ms)


def speedup(baseline_ms: float | None, ms: float | None) -> float | None:
    """baseline_ms / ms (above 1: faster than the baseline), or None when either time is missing."""
    if baseline_ms is None or ms is None or not ms > 0:
        return None
    return baseline_ms / ms
