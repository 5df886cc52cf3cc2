"""cuda_fast's sm90_split backend (the compiled 64-token intra stage and recurrence around Triton's chunk-parallel state
passing): the verifier and the registration on any machine; on an sm_90 GPU, where Triton's state pass is the faster
(forced here), the dispatch picks it, and its forward matches the fp64 oracle, Triton's forward within bf16 rounding,
and itself bit for bit on a rerun; with no split (the planner off) it runs the sequences whole. The compiled stages'
own poisoned-output tests are in test_cuda_sm90_v2.py."""
import pytest
import torch

from cuda_fast import sm90, sm90_split
from reference.kda import kda_recurrent
from tests.test_cuda_sm90 import CASE_IDS, CASES, _bf16_args, _case_inputs, _prepare, needs_target
from tests.utils import assert_close
from triton_kda import backends, chunk_kda
from triton_kda.backends import ENV_VAR


def test_verifier_keeps_sm90s_scope_and_needs_cc90():
    args = _bf16_args()
    ok, why = sm90_split.verify({**args, "g": args["g"].half()})
    assert not ok and "g must be bfloat16 or float32" in why
    ok, why = sm90_split.verify(args)  # CPU tensors
    assert not ok and "measured on compute capability 9.0 only" in why


def test_registered_between_sm90_and_the_backward():
    names = [b.name for b in backends.registered()]
    assert names.index("sm90") < names.index("sm90_split") < names.index("sm90_bwd")
    assert sm90_split.BACKEND.supports((9, 0)) and sm90_split.BACKEND.ops == sm90.BACKEND.ops


# ---- sm_90 GPU ----------------------------------------------------------------------------------------------------

# sequences of two or more 64-token chunks (one-chunk sequences are not split): h0, GVA varlen V-first, pre-gated,
# the exact path, and the softplus gate over four chunks
SPLIT_CASES = [CASES[0], CASES[2], CASES[3], CASES[4],
               (1, 200, 1, 2, None, dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True))]
SPLIT_IDS = [CASE_IDS[0], CASE_IDS[2], CASE_IDS[3], CASE_IDS[4], "B1-T200-H1-HV2-softplus"]


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", SPLIT_CASES, ids=SPLIT_IDS)
def test_split_forward_matches_oracle_and_triton(case, monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm90_split serves compute capability 9.0")
    # Triton's planner forced to split every sequence into one-chunk pieces; against the mma.sync recurrence, where
    # that split is the faster (`sm90.triton_state_faster`), sm90 declines and sm90_split takes the call
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP", "1")
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP_CHUNKS", "1")
    monkeypatch.setenv(sm90.STATE_ENV, "mma")
    monkeypatch.delenv(ENV_VAR, raising=False)
    d = _case_inputs(case)
    with torch.no_grad():
        o, ht = chunk_kda(**d)
        assert backends.backend_report()[-1].name == "sm90_split"
        o2, ht2 = chunk_kda(**d)
        monkeypatch.setenv(ENV_VAR, "triton")
        ref_o, ref_ht = chunk_kda(**d)
    assert torch.equal(o, o2) and torch.equal(ht, ht2)
    # two forwards with bf16 intermediates rounded apart (each within 5e-3 of the oracle): up to 5.4e-3 measured
    assert_close("o vs Triton", o, ref_o, 1.5e-2)
    assert_close("final_state vs Triton", ht, ref_ht, 1.5e-2)
    oracle_o, oracle_ht = kda_recurrent(**d)
    assert_close("o", o, oracle_o, 5e-3)
    assert_close("final_state", ht, oracle_ht, 5e-3)



@pytest.mark.gpu
@needs_target
def test_split_forward_without_pieces_runs_the_sequences_whole(monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm90_split serves compute capability 9.0")
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP", "0")
    d = _case_inputs(CASES[2])
    p, flags, _ = _prepare(d)
    ins = [d[name] for name in ("q", "k", "v", "g", "beta")]
    o, ht = sm90_split.chunk_kda_fwd(*ins, p.A_log, p.dt_bias, d["initial_state"], d["cu_seqlens"], p, flags)
    oracle_o, oracle_ht = kda_recurrent(**d)
    assert_close("o", o, oracle_o, 5e-3)
    assert_close("final_state", ht, oracle_ht, 5e-3)
