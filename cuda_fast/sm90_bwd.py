"""The compiled CUDA chunk-local backward of ``chunk_kda`` for Hopper (sm_90a) and Blackwell (sm_100a): backend
``sm90_bwd``, op ``kda_intra_bwd``.

It replaces two Triton kernels of a training step, ``triton_kda.intra._kda_intra_bwd_kernel`` and the gate backward
after it (``triton_kda.gate._kda_gate_bwd_kernel``): same inputs, same outputs (per 32 columns of K instead of per
K slice for the beta partials, per 64 columns for the dA_log ones), without the fp32 round trip of the gate
gradient's terms between them. Where H == HV it also does the q/k backward (``triton_kda.qk``'s l2norm backward;
a GVA group sum is then not needed) and writes the final dq, dk. The rest of the backward stays Triton.
Scope (the verifier declines everything else, with the reason): bf16 q/k/g with bf16 states, state gradients, do
and v_new (the bf16 training path), K = V = 128 or 256, 64-token chunks, K-first states, the E-form gate gradient.
cuda_fast/csrc/kda_intra_bwd.cu has the kernel; the library is built on first use (``cuda_fast.build``), never at
import, and ``kda_intra_bwd`` validates sizes, alignment and devices before it launches.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch

from cuda_fast.library import compiled_backend, entry_for
from cuda_fast.library import data_ptr as _ptr

NAME = "sm90_bwd"
OP = "kda_intra_bwd"
ENV_SWITCH = "TRITON_KDA_SM90_BWD"
BT = 64
HEAD_DIMS = (128, 256)  # K = V


class IntraBwdArgs(ctypes.Structure):
    """Mirror of ``IntraBwdArgs`` in kda_intra_bwd.cu (the library reports its size, checked at load)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in (
            "q", "k", "g", "A_log", "dt_bias", "gl", "rstd_q", "rstd_k", "beta", "h", "dh", "v_new", "do",
            "dvb", "dAqk", "dL", "cu_seqlens", "chunk_indices", "dq", "dk", "dg", "dbeta", "dA_log_part",
            "ddt_bias_part")),
        *((name, ctypes.c_int64) for name in ("TT", "NT", "H", "HV", "K", "V", "BT")),
        ("scale", ctypes.c_float),
        ("lower_bound", ctypes.c_float),
        ("gate", ctypes.c_int32),
        ("l2norm", ctypes.c_int32),
        ("qk_final", ctypes.c_int32),
    ]


def verify(args: dict) -> tuple[bool, str]:
    """Whether this backend takes a chunk-local and gate backward (``args``: see ``triton_kda.intra.intra_bwd``)."""
    for name in ("q", "g", "h", "dh", "do", "v_new"):
        if args[name].dtype != torch.bfloat16:
            return False, f"{name} must be bfloat16, got {args[name].dtype}"
    if args["K"] != args["V"] or args["K"] not in HEAD_DIMS:
        return False, f"needs K = V = 128 or 256, got K={args['K']} V={args['V']}"
    if args["BT"] != BT:
        return False, f"needs {BT}-token chunks, got chunk_size={args['BT']}"
    if args["state_v_first"]:
        return False, "state_v_first (V-first states) is not supported"
    if args["span"]:
        return False, "the spanning gate-gradient form is not supported"
    if args["HV"] > 65535:
        return False, f"HV={args['HV']} exceeds the grid limit 65535"
    for name in ("q", "k", "g", "h", "dh", "do", "v_new"):  # 16-byte loads (the other inputs are the backward's own)
        if args[name].data_ptr() % 16:
            return False, f"{name}'s data pointer is not 16-byte aligned"
    return True, f"bf16, K = V = {args['K']}, 64-token chunks"


class IntraBwdGrads(NamedTuple):
    """The kernel's outputs, in the order of ``triton_kda.intra.IntraBwdOut``."""
    dq: torch.Tensor                    # H == HV: [TT, H, K] in q's dtype, w.r.t. q as passed (l2norm backward done);
    dk: torch.Tensor                    #   else [TT, HV, K] fp32 per v-head, w.r.t. the normalised q (k likewise)
    dg: torch.Tensor                    # [TT, HV, K] bf16, w.r.t. g as passed
    dbeta: torch.Tensor                 # [K / 32, TT, HV] fp32, beta-gradient partials through w and L, per 32
                                        #   columns of K
    dA_log_part: torch.Tensor | None    # [K / 64, NT, HV] fp32 per 64 columns of K and chunk (with A_log in the gate)
    ddt_bias_part: torch.Tensor | None  # [NT, HV, K] fp32 per chunk (with dt_bias in the gate)
    qk_final: bool                      # dq, dk are the final gradients (H == HV)


def grads_like(q, g, NT: int, *, has_a_log: bool, has_dt_bias: bool, fill: float | None = None) -> IntraBwdGrads:
    """Output buffers for `kda_intra_bwd` (flattened q [TT, H, K], g [TT, HV, K]), NaN-filled with ``fill=nan``."""
    TT, HV, K = g.shape
    final = q.shape[1] == HV

    def new(*shape, dtype=torch.float32):
        x = torch.empty(*shape, device=q.device, dtype=dtype)
        return x if fill is None else x.fill_(fill)

    dqk = (lambda: new(*q.shape, dtype=q.dtype)) if final else (lambda: new(TT, HV, K))
    return IntraBwdGrads(dqk(), dqk(), new(TT, HV, K, dtype=g.dtype), new(K // 32, TT, HV),
                         new(K // 64, NT, HV) if has_a_log else None, new(NT, HV, K) if has_dt_bias else None, final)


def kda_intra_bwd(q, k, g, A_log, dt_bias, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, dvb, do, dAqk, dL, plan,
                  scale: float, gate: int, lower_bound: float | None, l2norm: bool, *,
                  out: IntraBwdGrads | None = None) -> IntraBwdGrads:
    """The chunk-local backward and the gate backward on flattened, contiguous tensors (shapes as in
    ``IntraBwdArgs``'s C mirror; A_log [HV] and dt_bias [HV * K] or None, any float dtype; gate: triton_kda.gate's
    GATE constexpr; l2norm: use_qk_l2norm_in_kernel; plan: the ``ChunkPlan`` of 64-token chunks). The kernel forms
    the gate cumsum from g itself (sequential fp32 sums). Where H == HV it also takes dq and dk through the l2norm
    backward (``qk_final``: a cluster of the two halves of K shares each row's dot). ``out`` may be given (tests
    pass NaN-filled buffers)."""
    TT, H, K = q.shape
    HV, V = g.shape[1], v_new.shape[2]
    dev = q.device
    lib = entry_for(dev, "kda_intra_bwd", IntraBwdArgs)
    A_log, dt_bias = (x.float().contiguous() if gate and x is not None else None for x in (A_log, dt_bias))
    if out is None:
        out = grads_like(q, g, plan.NT, has_a_log=A_log is not None, has_dt_bias=dt_bias is not None)
    args = IntraBwdArgs(
        q=_ptr(q), k=_ptr(k), g=_ptr(g), A_log=_ptr(A_log), dt_bias=_ptr(dt_bias), gl=_ptr(gl),
        rstd_q=_ptr(rstd_q), rstd_k=_ptr(rstd_k), beta=_ptr(beta_act), h=_ptr(h), dh=_ptr(dh), v_new=_ptr(v_new),
        do=_ptr(do), dvb=_ptr(dvb), dAqk=_ptr(dAqk), dL=_ptr(dL), cu_seqlens=_ptr(plan.cu_seqlens),
        chunk_indices=_ptr(plan.chunk_indices), dq=_ptr(out.dq), dk=_ptr(out.dk), dg=_ptr(out.dg),
        dbeta=_ptr(out.dbeta), dA_log_part=_ptr(out.dA_log_part), ddt_bias_part=_ptr(out.ddt_bias_part),
        TT=TT, NT=plan.NT, H=H, HV=HV, K=K, V=V, BT=BT, scale=scale,
        lower_bound=lower_bound if lower_bound is not None else 0.0, gate=gate, l2norm=int(l2norm),
        qk_final=int(out.qk_final),
    )
    with torch.cuda.device(dev):
        lib(args, torch.cuda.current_stream(dev).cuda_stream)
    return out


BACKEND = compiled_backend(NAME, OP, ENV_SWITCH, verify, kda_intra_bwd, "kda_intra_bwd", IntraBwdArgs)
