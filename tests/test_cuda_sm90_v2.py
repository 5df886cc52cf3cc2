"""cuda_fast's sm90_v2 backend (the compiled 64-token intra stage, then the 64-token recurrence on wgmma): the switch,
the verifier, the registration and the warpgroup count's check on any machine; on an sm_90 GPU the intra stage
against kda_chunk's fp64 intermediates with NaN-poisoned outputs and within bf16 rounding of Triton's intra forward;
the recurrence (one and two consumer warpgroups a CTA, on Triton's intra outputs) against the fp64 oracle with
NaN-poisoned outputs, within bf16 rounding of Triton's state pass, bit-identical on a rerun; and the dispatch with the
switch on, every case against the oracle."""
import math

import pytest
import torch

from cuda_fast import sm90, sm90_v2
from reference.kda import kda_chunk, kda_recurrent
from tests.test_cuda_sm90 import CASE_IDS, CASES, _bf16_args, _case_inputs, _prepare, needs_target
from tests.utils import assert_close
from triton_kda import backends, chunk_kda
from triton_kda.chunk_fwd import intra_stage, plan_chunks
from triton_kda.state import state_fwd


@pytest.mark.parametrize("mode, on", [(None, False), ("v1", False), ("0", False), ("v2", True)])
def test_switch(mode, on, monkeypatch):
    if mode is None:
        monkeypatch.delenv(sm90_v2.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(sm90_v2.ENV_SWITCH, mode)
    ok, why = sm90_v2.verify(_bf16_args())
    assert ok == on and (on or f"off ({sm90_v2.ENV_SWITCH} is not v2)" in why)


def test_bad_switch_value(monkeypatch):
    monkeypatch.setenv(sm90_v2.ENV_SWITCH, "fast")
    with pytest.raises(ValueError, match="TRITON_KDA_SM90_FWD must be 'v1' or 'v2', got 'fast'"):
        sm90_v2.verify(_bf16_args())


def test_verifier_keeps_sm90s_scope(monkeypatch):
    monkeypatch.setenv(sm90_v2.ENV_SWITCH, "v2")
    args = _bf16_args()
    ok, why = sm90_v2.verify({**args, "g": args["g"].half()})
    assert not ok and "g must be bfloat16 or float32" in why


def test_bad_warpgroup_count():
    with pytest.raises(ValueError, match="wgs must be 0, 1 or 2, got 3"):
        sm90_v2.state64_fwd(None, None, None, output_final_state=False, state_v_first=False, wgs=3)


def test_registered_before_sm90():
    names = [b.name for b in backends.registered()]
    assert names.index("sm90_v2") < names.index("sm90")
    assert sm90_v2.BACKEND.supports((9, 0)) and sm90_v2.BACKEND.ops == sm90.BACKEND.ops


# ---- sm_90 GPU ----------------------------------------------------------------------------------------------------

def _intra(d):
    p, flags, args = _prepare(d)
    B, T, HV, V = d["v"].shape
    plan = plan_chunks(B, T, sm90_v2.BT, d["q"].device, p.seqlens_cpu, d.get("cu_seqlens"))
    ins = [d[name] for name in ("q", "k", "v", "g", "beta")]
    return p, plan, intra_stage(*ins, p.A_log, p.dt_bias, p.scale, plan, sm90_v2.BT, flags, store_aux=False)


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("wgs", [1, 2], ids=["1wg", "2wg"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_recurrence_matches_oracle_and_triton(case, wgs):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the 64-token recurrence is in the sm_90a library")
    d = _case_inputs(case)
    p, plan, intra = _intra(d)
    B, T, HV, V = d["v"].shape
    h0 = d.get("initial_state")
    o = torch.full((B * T, HV, V), math.nan, device="cuda", dtype=torch.bfloat16)
    ht = torch.full((plan.N, HV, 128, 128), math.nan, device="cuda")
    o, ht = sm90_v2.state64_fwd(intra, h0, plan, output_final_state=True, state_v_first=p.state_v_first, out=o,
                                final_state=ht, wgs=wgs)
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", o.view(B, T, HV, V), ref_o, 5e-3)
    assert_close("final_state", ht, ref_ht, 5e-3)
    st = state_fwd(intra, h0, plan, sm90_v2.BT, V, output_final_state=True, state_v_first=p.state_v_first,
                   store_h=False, store_v_new=False, h_dtype=torch.bfloat16)
    assert_close("o vs Triton", o, st.o, 5e-3)
    assert_close("final_state vs Triton", ht, st.final_state, 5e-3)
    again, _ = sm90_v2.state64_fwd(intra, h0, plan, output_final_state=False, state_v_first=p.state_v_first, wgs=wgs)
    assert torch.equal(again, o)


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_intra64_matches_chunked_oracle_and_triton(case):
    """`intra64_fwd` (NaN-poisoned outputs) against kda_chunk's fp64 intermediates at chunk size 64, within bf16
    rounding of Triton's intra forward on the same inputs, bit-identical on a rerun."""
    d = _case_inputs(case)
    p, plan, tri = _intra(d)
    flags = _prepare(d)[1]
    ins = [d[name] for name in ("q", "k", "v", "g", "beta")]
    out = sm90_v2.intra64_fwd(*ins, p.A_log, p.dt_bias, p.scale, plan, flags, poison=True)
    ref = kda_chunk(**d, chunk_size=sm90_v2.BT)
    seqlens = case[4] or [case[1]] * case[0]
    last, chunks_last, start = [], [], 0  # per token: its chunk's last token; per chunk: its last token
    for n in seqlens:
        last += [start + min(t // 64 * 64 + 63, n - 1) for t in range(n)]
        chunks_last += [start + min(c * 64 + 63, n - 1) for c in range(-(-n // 64))]
        start += n
    last, chunks_last = (torch.tensor(x, device="cuda", dtype=torch.long) for x in (last, chunks_last))
    HV = d["v"].shape[2]
    q, k = (d[name].double().flatten(0, 1).repeat_interleave(HV // d[name].shape[2], 1) for name in ("q", "k"))
    if d.get("use_qk_l2norm_in_kernel"):
        q, k = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    G = ref.g_cumsum
    refs = dict(Aqk=ref.Aqk, w=ref.w, u=ref.u, qg=q * p.scale * torch.exp(G), kg=k * torch.exp(G[last] - G))
    for name, r in refs.items():
        assert_close(name, getattr(out, name), r, 1e-2)
        assert_close(f"{name} vs Triton", getattr(out, name), getattr(tri, name), 1e-2)
    assert_close("gl", out.gl, G[chunks_last] / math.log(2), 1e-5)
    again = sm90_v2.intra64_fwd(*ins, p.A_log, p.dt_bias, p.scale, plan, flags)
    assert all(torch.equal(x, y) for x, y in zip(again[:6], out[:6], strict=True))


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_dispatch_with_the_switch(case, monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the 64-token recurrence is in the sm_90a library")
    monkeypatch.setenv(sm90_v2.ENV_SWITCH, "v2")
    d = _case_inputs(case)
    backends.clear_backend_report()
    with torch.no_grad():
        o, ht = chunk_kda(**d)
        again = chunk_kda(**d)[0]
    assert backends.backend_report()[-1].name == "sm90_v2"
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", o, ref_o, 5e-3)
    assert_close("final_state", ht, ref_ht, 5e-3)
    assert torch.equal(again, o)
