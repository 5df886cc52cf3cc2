"""The fused Hopper forward's first milestone: backend ``sm90_v2`` (opt-in, ``TRITON_KDA_SM90_FWD=v2``).

Triton's intra forward forms w, u, qg, kg, Aqk and the chunks' last gate cumsums over 64-token chunks
(``triton_kda.chunk_fwd.intra_stage``), and the recurrence walks them on wgmma (``kda_state64_fwd_kernel`` in
cuda_fast/csrc/kda_fwd.cu): a quarter of the 16-token recurrence's dependent steps. It serves what ``sm90`` serves
(inference, bf16, K = V = 128; ``sm90.verify`` decides, with its reasons) on compute capability 9.0 only (the kernel
is in the sm_90a library). Off by default until it beats ``sm90``: with the switch unset it declines every call and
``sm90`` runs.
"""
from __future__ import annotations

import ctypes
import os

import torch

from cuda_fast import sm90
from cuda_fast.library import compiled_backend, entry_for
from cuda_fast.library import data_ptr as _ptr
from triton_kda.chunk_fwd import intra_stage, plan_chunks

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


def state64_fwd(intra, initial_state, plan, *, output_final_state: bool, state_v_first: bool,
                out: torch.Tensor | None = None, final_state: torch.Tensor | None = None,
                wgs: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The recurrence over 64-token chunks: (o [TT, HV, V] bf16, final state [N, HV, K, V] fp32 (V-first if asked) or
    None) from ``intra`` (``triton_kda.wy.IntraOut`` of Triton's intra forward at BT = 64, bf16) and the fp32 initial
    state or None; ``out`` / ``final_state`` may be given (tests pass NaN-filled buffers). ``wgs``: consumer warpgroups
    per CTA, 1 (a CTA per 64 state columns), 2 (a CTA per head) or 0 (2 where one-warpgroup CTAs outnumber the SMs)."""
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
        o=_ptr(o), ht=_ptr(ht), N=plan.N, TT=TT, NT=plan.NT, HV=HV, v_first=int(state_v_first), wgs=wgs,
    )
    with torch.cuda.device(dev):
        lib(args, torch.cuda.current_stream(dev).cuda_stream)
    return o, ht


def chunk_kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
    """The registry's entry point (``triton_kda.ops`` documents the call)."""
    B, T, HV, V = v.shape
    plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu, cu_seqlens)
    intra = intra_stage(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, BT, flags, store_aux=False)
    o, ht = state64_fwd(intra, initial_state, plan, output_final_state=flags["output_final_state"],
                        state_v_first=p.state_v_first)
    return o.view(B, T, HV, V), ht


BACKEND = compiled_backend(NAME, sm90.OP, ENV_SWITCH, verify, chunk_kda_fwd, "kda_state64_fwd", State64Args)
