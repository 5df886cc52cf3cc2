"""Few heads over long sequences on Hopper: backend ``sm90_split``, the compiled 64-token intra stage
(``sm90_v2.intra64_fwd``) feeding Triton's state pass, whose intra-card chunk-parallel planner splits the long
sequences into pieces run in parallel (``triton_kda.state.state_fwd``, state_cp.py).

It takes exactly the calls ``sm90`` leaves to Triton because Triton's state pass beats its recurrence there
(``sm90.triton_state_faster``: few heads, sequences past 8192 tokens), on compute capability 9.0 (where both were
measured); the result is Triton's forward with its intra stage replaced: same plan, same pieces, o and the final state
within bf16 rounding of Triton's. ``TRITON_KDA_SM90_SPLIT=0`` leaves these calls to Triton.
"""
from __future__ import annotations

import torch

from cuda_fast import sm90, sm90_v2
from cuda_fast.library import compiled_backend
from triton_kda.chunk_fwd import plan_chunks
from triton_kda.state import state_fwd

NAME = "sm90_split"
ENV_SWITCH = "TRITON_KDA_SM90_SPLIT"  # "0": these calls go to Triton
BT = sm90_v2.BT


def verify(args: dict) -> tuple[bool, str]:
    """Whether this backend takes a ``chunk_kda`` call: in ``sm90``'s scope, on compute capability 9.0, where Triton's
    state pass is the faster one."""
    ok, why = sm90.scope(args)
    if not ok:
        return ok, why
    if not args["q"].is_cuda or torch.cuda.get_device_capability(args["q"].device) != (9, 0):
        return False, "measured on compute capability 9.0 only"
    why = sm90.triton_state_faster(args)
    if not why:
        return False, "sm90's recurrence is the faster here"
    return True, f"compiled 64-token intra stage, then Triton's state pass ({why})"


def chunk_kda_fwd(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
    """The registry's entry point (``triton_kda.ops`` documents the call)."""
    B, T, HV, V = v.shape
    plan = plan_chunks(B, T, BT, q.device, p.seqlens_cpu, cu_seqlens)
    intra = sm90_v2.intra64_fwd(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, flags)
    st = state_fwd(intra, initial_state.contiguous() if initial_state is not None else None, plan, BT, V,
                   output_final_state=flags["output_final_state"], state_v_first=p.state_v_first, store_h=False,
                   store_v_new=False, h_dtype=q.dtype)
    return st.o.view(B, T, HV, V), st.final_state


BACKEND = compiled_backend(NAME, sm90.OP, ENV_SWITCH, verify, chunk_kda_fwd, "kda_intra64_fwd",
                           sm90_v2.Intra64Args)
