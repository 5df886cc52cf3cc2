"""End-to-end forward of triton_kda.chunk_kda against the fp64 recurrent oracle, over the flag grid."""
import pytest
import torch

from reference.kda import kda_recurrent
from tests.utils import DEVICE, assert_close, case_id, make_inputs
from triton_kda import chunk_kda

# (B, T, H, HV, K, V, seqlens, chunk_size, options)
CASES = [
    (1, 64, 1, 1, 16, 16, None, 64, {}),
    (2, 70, 1, 2, 32, 16, None, 64, dict(use_qk_l2norm_in_kernel=True, initial_state=True)),
    (1, 100, 2, 4, 32, 32, None, 32, dict(gate="strong")),
    (1, 90, 1, 2, 16, 32, None, 64, dict(use_gate_in_kernel=True)),
    (1, 90, 1, 2, 16, 16, None, 64, dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True)),
    (1, 50, 1, 1, 16, 16, None, 32, dict(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)),
    (1, 106, 1, 2, 16, 16, [0, 37, 64, 5], 64, dict(initial_state=True, state_v_first=True)),
    (1, 131, 2, 2, 32, 16, [65, 1, 0, 65], 32, dict(use_gate_in_kernel=True, lower_bound=-3.0, safe_gate=True,
                                                     use_qk_l2norm_in_kernel=True, initial_state=True)),
    (1, 40, 1, 1, 100, 60, None, 64, {}),
    (3, 13, 1, 8, 16, 16, None, 64, dict(initial_state=True)),
]


def _kwargs(B, T, H, HV, K, V, seqlens, BT, opts, dtype):
    opts = dict(opts)
    safe_gate = opts.pop("safe_gate", False)
    d = make_inputs(B, T, H, HV, K, V, dtype=dtype, device=DEVICE, seqlens=seqlens, output_final_state=True, **opts)
    d["safe_gate"] = safe_gate
    return d, BT


def _ids(c):
    B, T, H, HV, K, V, seqlens, BT, opts = c
    flags = "-".join(f"{k}={v}" for k, v in opts.items())
    tail = ("-varlen" if seqlens else "") + (f"-{flags}" if flags else "")
    return case_id(B=B, T=T, H=H, HV=HV, K=K, V=V) + f"-BT{BT}" + tail


def _check(case, dtype, tol):
    d, BT = _kwargs(*case, dtype)
    o, ht = chunk_kda(**d, chunk_size=BT)
    ref_o, ref_ht = kda_recurrent(**d)
    assert o.dtype == d["q"].dtype and o.shape == d["v"].shape
    assert ht.dtype == torch.float32
    assert_close("o", o, ref_o, tol)
    assert_close("final_state", ht, ref_ht, tol)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_fp32(case):
    _check(case, torch.float32, 1e-5)


@pytest.mark.parametrize("case", CASES[:4] + CASES[6:8], ids=_ids)
def test_forward_fp16(case):
    _check(case, torch.float16, 5e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_bf16(case):
    _check(case, torch.bfloat16, 5e-3)


def test_no_final_state_and_defaults():
    d = make_inputs(1, 20, 1, 1, 16, 16, device=DEVICE)
    o, ht = chunk_kda(d["q"], d["k"], d["v"], d["g"], d["beta"])
    assert ht is None
    assert_close("o", o, kda_recurrent(d["q"], d["k"], d["v"], d["g"], d["beta"])[0], 1e-5)


def test_non_contiguous_inputs():
    d = make_inputs(1, 33, 2, 2, 16, 16, device=DEVICE, output_final_state=True)
    ref_o, ref_ht = kda_recurrent(**d)
    nc = {k: (v.transpose(1, 2).contiguous().transpose(1, 2) if k in ("q", "k", "v", "g") else v) for k, v in d.items()}
    assert not nc["q"].is_contiguous()
    o, ht = chunk_kda(**nc)
    assert_close("o", o, ref_o, 1e-5)
    assert_close("final_state", ht, ref_ht, 1e-5)


def test_repeat_is_bit_identical():
    d = make_inputs(1, 75, 1, 2, 16, 16, device=DEVICE, use_gate_in_kernel=True, output_final_state=True)
    o1, h1 = chunk_kda(**d)
    o2, h2 = chunk_kda(**d)
    assert torch.equal(o1, o2) and torch.equal(h1, h2)


def test_beta_fp32_with_fp16_inputs():
    d = make_inputs(1, 40, 1, 1, 16, 16, dtype=torch.float16, device=DEVICE, output_final_state=True)
    d["beta"] = d["beta"].float()
    o, ht = chunk_kda(**d)
    ref_o, ref_ht = kda_recurrent(**d)
    assert o.dtype == torch.float16
    assert_close("o", o, ref_o, 5e-3)


@pytest.mark.parametrize("seqlens", [None, [0, 50, 30]], ids=["fixed", "varlen"])
def test_intermediate_states(seqlens):
    """return_intermediate_states (inference mode): h [B, NT, HV, K, V] equals the oracle's chunk-start states."""
    from reference.kda import kda_chunk

    B, T = (2, 50) if seqlens is None else (1, 80)
    d = make_inputs(B, T, 1, 2, 16, 16, device=DEVICE, seqlens=seqlens, initial_state=True)
    with torch.inference_mode():
        o, ht, h = chunk_kda(**d, return_intermediate_states=True, chunk_size=32)
    ref = kda_chunk(**d, chunk_size=32)
    assert h.dtype == d["q"].dtype
    assert h.shape == (B if seqlens is None else 1, ref.h.shape[0] // (B if seqlens is None else 1), 2, 16, 16)
    assert_close("h", h.reshape(ref.h.shape), ref.h, 1e-5)
    assert_close("o", o, ref.o, 1e-5)


def test_cp_context_checked_before_any_launch():
    """A cp_context that is no CP context fails validation (the CP runs themselves: tests/test_cp.py)."""
    d = make_inputs(1, 8, 1, 1, 16, 16, device=DEVICE)
    with pytest.raises(TypeError, match="`cp_context` must be a context from triton_kda.build_cp_context"):
        chunk_kda(**d, cp_context=object())
