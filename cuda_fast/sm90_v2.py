"""The fused Hopper forward's milestones: backend ``sm90_v2`` (opt-in, ``TRITON_KDA_SM90_FWD=v2``).

Over 64-token chunks: the compiled intra stage (``kda_intra64_fwd_kernel`` in cuda_fast/csrc/kda_fwd.cu) forms w, u,
qg, kg, Aqk and the chunks' last gate cumsums as Triton's intra forward does at BT = 64
(``triton_kda.chunk_fwd.intra_stage``), and the recurrence walks them on wgmma (``kda_state64_fwd_kernel``): a
quarter of the 16-token recurrence's dependent steps. It serves what ``sm90`` serves (inference, bf16, K = V = 128;
``sm90.verify`` decides, with its reasons) on compute capability 9.0 only (the recurrence is in the sm_90a library).
Off by default until it beats ``sm90``: with the switch unset it declines every call and ``sm90`` runs.
"""
from __future__ import annotations

import ctypes
import os

import torch

from cuda_fast import sm90
from cuda_fast.library import compiled_backend, entry_for
from cuda_fast.library import data_ptr as _ptr
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.wy import IntraOut

NAME = "sm90_v2"
ENV_SWITCH = "TRITON_KDA_SM90_FWD"  # "v2": this backend; unset, "v1" or "0": `sm90`
BT = 64


class State64Args(ctypes.Structure):
    """Mirror of ``State64Args`` in kda_fwd.cu (the library reports its size, checked at load)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in (
            "qg", "kg", "w", "u", "aqk", "gl", "h0", "cu_seqlens", "chunk_offsets", "o", "ht")),
        *((name, ctypes.c_int64) for name in ("N", "TT", "NT", "HV")),
        *((name, ctypes.c_int32) for name in ("v_first", "wgs")),
    ]


class Intra64Args(ctypes.Structure):
    """Mirror of ``Intra64Args`` in kda_fwd.cu (the library reports its size, checked at load)."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in (
            "q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "chunk_indices", "qg", "kg", "w", "u", "aqk",
            "gl")),
        *((name, ctypes.c_int64) for name in ("TT", "NT", "H", "HV", "K", "V")),
        *((name, ctypes.c_float) for name in ("scale", "lower_bound", "beta_scale")),
        *((name, ctypes.c_int32) for name in ("gate", "l2norm", "beta_sigmoid", "g_fp32", "beta_fp32")),
    ]


def enabled() -> bool:
    """``TRITON_KDA_SM90_FWD=v2`` (unset, "v1" or "0": off)."""
    mode = os.environ.get(ENV_SWITCH, "").strip()
    if mode not in ("", "0", "v1", "v2"):
        raise ValueError(f"{ENV_SWITCH} must be 'v1' or 'v2', got {mode!r}")
    return mode == "v2"


def verify(args: dict) -> tuple[bool, str]:
    """Whether this backend takes a ``chunk_kda`` call: opted in, ``sm90``'s scope, compute capability 9.0."""
    if not enabled():
        return False, f"off ({ENV_SWITCH} is not v2)"
    ok, why = sm90.verify(args)
    if not ok:
        return ok, why
    if args["q"].is_cuda and torch.cuda.get_device_capability(args["q"].device) != (9, 0):
        return False, "the 64-token recurrence is in the sm_90a library only"
    return True, "bf16, K = V = 128, inference, 64-token recurrence"


def intra64_fwd(q, k, v, g, beta, A_log, dt_bias, scale: float, plan, flags: dict, *,
                poison: bool = False) -> IntraOut:
    """The compiled intra stage over 64-token chunks: ``IntraOut`` (Aqk [TT, HV, 64], w, qg, kg [TT, HV, K], u
    [TT, HV, V] bf16, gl [NT, HV, K] fp32; no aux outputs) from [B, T, ...] bf16 q, k [.., H, K], v [.., HV, V], g
    (bf16 or fp32) [.., HV, K], beta [.., HV] and A_log / dt_bias in any shape; ``plan`` at BT = 64, ``flags``
    chunk_kda's options. ``poison`` fills the outputs with NaN first (tests: rows the kernel must write)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dev = q.device
    lib = entry_for(dev, "kda_intra64_fwd", Intra64Args)
    TT = B * T
    bf16 = dict(device=dev, dtype=torch.bfloat16)
    out = IntraOut(Aqk=sm90.buffer((TT, HV, BT), poison, **bf16), w=sm90.buffer((TT, HV, K), poison, **bf16),
                   u=sm90.buffer((TT, HV, V), poison, **bf16), qg=sm90.buffer((TT, HV, K), poison, **bf16),
                   kg=sm90.buffer((TT, HV, K), poison, **bf16),
                   gl=sm90.buffer((plan.NT, HV, K), poison, device=dev, dtype=torch.float32),
                   rstd_q=None, rstd_k=None, beta=None, Akk=None, rs=torch.empty(0, HV, device=dev))
    keep, fields = sm90.input_fields(q, k, v, g, beta, A_log, dt_bias, scale, flags)  # keep: alive over the launch
    args = Intra64Args(
        **fields, cu_seqlens=_ptr(plan.cu_seqlens), chunk_indices=_ptr(plan.chunk_indices), qg=_ptr(out.qg),
        kg=_ptr(out.kg), w=_ptr(out.w), u=_ptr(out.u), aqk=_ptr(out.Aqk), gl=_ptr(out.gl), TT=TT, NT=plan.NT, H=H,
        HV=HV, K=K, V=V,
    )
    with torch.cuda.device(dev):
        lib(args, torch.cuda.current_stream(dev).cuda_stream)
    return out


def state64_fwd(intra, initial_state, plan, *, output_final_state: bool, state_v_first: bool,
                out: torch.Tensor | None = None, final_state: torch.Tensor | None = None,
                wgs: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The recurrence over 64-token chunks: (o [TT, HV, V] bf16, final state [N, HV, K, V] fp32 (V-first if asked) or
    None) from ``intra`` (``triton_kda.wy.IntraOut`` at BT = 64, bf16: ``intra64_fwd``'s or Triton's intra forward's)
    and the fp32 initial state or None; ``out`` / ``final_state`` may be given (tests pass NaN-filled buffers).
    ``wgs``: consumer warpgroups per CTA, 1 (a CTA per 64 state columns), 2 (a CTA per head) or 0 (2 where
    one-warpgroup CTAs outnumber the SMs)."""
    if wgs not in (0, 1, 2):
        raise ValueError(f"wgs must be 0, 1 or 2, got {wgs!r}")
    TT, HV, K = intra.w.shape
    V = intra.u.shape[-1]
    dev = intra.w.device
    lib = entry_for(dev, "kda_state64_fwd", State64Args)
    o = torch.empty(TT, HV, V, device=dev, dtype=torch.bfloat16) if out is None else out
    ht = None
    if output_final_state:
        ht = torch.empty(plan.N, HV, K, V, device=dev, dtype=torch.float32) if final_state is None else final_state
    h0 = initial_state.contiguous() if initial_state is not None else None
    args = State64Args(
        qg=_ptr(intra.qg), kg=_ptr(intra.kg), w=_ptr(intra.w), u=_ptr(intra.u), aqk=_ptr(intra.Aqk),
        gl=_ptr(intra.gl), h0=_ptr(h0), cu_seqlens=_ptr(plan.cu_seqlens), chunk_offsets=_ptr(plan.chunk_offsets),
        o=_ptr(o), ht=_ptr(ht), N=plan.N, TT=TT, NT=intra.gl.shape[0], HV=HV, v_first=int(state_v_first), wgs=wgs,
    )
    with torch.cuda.device(dev):
        lib(args, torch.cuda.current_stream(dev).cuda_stream)
    return o, ht


def chunk_kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
    """The registry's entry point (``triton_kda.ops`` documents the call)."""
    B, T, HV, V = v.shape
    plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu, cu_seqlens)
    intra = intra64_fwd(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, flags)
    o, ht = state64_fwd(intra, initial_state, plan, output_final_state=flags["output_final_state"],
                        state_v_first=p.state_v_first)
    return o.view(B, T, HV, V), ht


BACKEND = compiled_backend(NAME, sm90.OP, ENV_SWITCH, verify, chunk_kda_fwd, "kda_state64_fwd", State64Args)
