"""chunk_kda's use of the backend registry (triton_kda.backends): a fake backend is served, skipped, bypassed or forced.

Each test swaps in its own registry holding one fake backend, whose injected capability makes the CPU look like an
sm90 device; the real default registry is restored afterwards. Shapes are tiny: a Triton fallback runs through the
interpreter. The last test registers a fake chunk-local backward (op `kda_intra_bwd`) and counts the backward's gate
cumsums.
"""
import logging

import pytest
import torch

import triton_kda
from reference.kda import kda_recurrent
from tests.utils import DEVICE, assert_close, make_inputs
from triton_kda import backends, chunk_kda
from triton_kda.backends import ENV_VAR, Backend, Registry, ReportEntry

OP = "chunk_kda_fwd"


class Fake:
    """A backend whose verifier returns `verdict` and records what it saw; its implementation records its calls and
    returns zeros of chunk_kda's output shapes (kept in `result`)."""

    def __init__(self, verdict=(True, "fits")):
        self.verdict = verdict
        self.seen, self.calls = [], []
        self.result = None

    def verify(self, args):
        self.seen.append(args)
        return self.verdict

    def impl(self, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags):
        self.calls.append((q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, p, flags))
        ht = torch.zeros(p.N, p.HV, p.K, p.V) if flags["output_final_state"] else None
        self.result = (torch.zeros_like(v), ht)
        return self.result


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    backend = Fake()
    reg = Registry(capability_fn=lambda device: (9, 0))
    reg.register(Backend(name="fake", ops={OP}, capabilities={(9, 0)}, verifiers={OP: backend.verify},
                         loader=lambda: backend.impl))
    monkeypatch.setattr(backends, "default_registry", reg)
    return backend


def _inputs(**opts):
    return make_inputs(1, 20, 1, 2, 16, 16, device=DEVICE, **opts)


def test_routes_to_a_backend_that_accepts(fake):
    d = _inputs(initial_state=True, output_final_state=True)
    o, ht = chunk_kda(**d, chunk_size=32, safe_gate=False)
    assert o is fake.result[0] and ht is fake.result[1]
    (q, k, v, g, beta, A_log, dt_bias, h0, cu_seqlens, problem, flags), = fake.calls
    names = ("q", "k", "v", "g", "beta", "initial_state")
    assert all(given is d[name] for given, name in zip((q, k, v, g, beta, h0), names, strict=True))
    assert (A_log, dt_bias, cu_seqlens) == (None, None, None)
    assert (problem.H, problem.HV, problem.K, problem.V, problem.chunk_size) == (1, 2, 16, 16, 32)
    assert flags["output_final_state"] and not flags["safe_gate"] and not flags["use_gate_in_kernel"]
    args, = fake.seen
    assert args["q"] is d["q"] and args["initial_state"] is d["initial_state"]
    assert (args["dtype"], args["H"], args["HV"], args["K"], args["V"]) == (torch.float32, 1, 2, 16, 16)
    assert args["varlen"] is False and args["requires_grad"] is False and args["output_final_state"] is True
    assert triton_kda.backend_report() == [ReportEntry("fake", OP, "fake (priority 0): fits")]


def test_verifier_sees_every_flag_varlen_and_grad_mode(fake):
    d = make_inputs(1, 20, 2, 2, 16, 16, device=DEVICE, seqlens=[7, 13], use_gate_in_kernel=True,
                    lower_bound=-4.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                    use_qk_l2norm_in_kernel=True, state_v_first=True, initial_state=True, requires_grad=True)
    fake.verdict = (False, "forward only")
    chunk_kda(**d, safe_gate=True, disable_recompute=True)
    args, = fake.seen
    expected = dict(use_gate_in_kernel=True, lower_bound=-4.0, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                    use_qk_l2norm_in_kernel=True, state_v_first=True, safe_gate=True, disable_recompute=True,
                    output_final_state=False, return_intermediate_states=False, varlen=True, requires_grad=True, N=2)
    assert {name: args[name] for name in expected} == expected
    assert args["cu_seqlens"] is d["cu_seqlens"] and args["A_log"] is d["A_log"] and args["dt_bias"] is d["dt_bias"]
    assert args["seqlens_cpu"].tolist() == [0, 7, 20]
    fake.verdict = (True, "fits")
    with torch.no_grad():
        chunk_kda(**d, safe_gate=True)
    assert fake.seen[-1]["requires_grad"] is False and len(fake.calls) == 1


def test_a_backend_accepting_a_call_that_needs_a_backward_is_an_error(fake):
    d = _inputs(requires_grad=True)
    with pytest.raises(RuntimeError, match=r"cuda_fast backend 'fake' accepted a chunk_kda call that needs a backward"):
        chunk_kda(**d)
    assert fake.seen[-1]["requires_grad"] is True and fake.calls == []


def test_falls_back_to_triton_when_the_verifier_rejects(fake, caplog):
    fake.verdict = (False, "V=16 < 64")
    d = _inputs(output_final_state=True)
    with caplog.at_level(logging.INFO, logger="triton_kda.backend"):
        for _ in range(2):
            o, ht = chunk_kda(**d)
    assert fake.calls == []
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", o, ref_o, 1e-5)
    assert_close("final_state", ht, ref_ht, 1e-5)
    reason = "no CUDA backend takes the call: fake: verifier: V=16 < 64"
    assert triton_kda.backend_report() == [ReportEntry("triton", OP, reason)] * 2
    assert [r.getMessage() for r in caplog.records] == [f"backend fake rejected for {OP}: verifier: V=16 < 64"]


def test_forcing_triton_bypasses_the_backend(fake, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "triton")
    d = _inputs()
    o, _ = chunk_kda(**d)
    assert fake.seen == [] and fake.calls == []
    assert_close("o", o, kda_recurrent(**d)[0], 1e-5)
    assert triton_kda.backend_report() == [ReportEntry("triton", OP, f"forced by {ENV_VAR}=triton")]


def test_forcing_a_backend_that_rejects_raises_its_reason(fake, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "fake")
    fake.verdict = (False, "varlen is not supported")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}=fake forces backend 'fake', which cannot take this {OP} call: "
                                         r"verifier: varlen is not supported"):
        chunk_kda(**_inputs())
    assert fake.calls == []
    fake.verdict = (True, "fits")
    assert chunk_kda(**_inputs())[0] is fake.result[0]
    assert triton_kda.backend_report() == [ReportEntry("fake", OP, f"forced by {ENV_VAR}=fake: fits")]


@pytest.mark.parametrize("mode", ["auto", "fake", "no-such-backend"])
def test_validation_runs_before_any_backend(fake, monkeypatch, mode):
    monkeypatch.setenv(ENV_VAR, mode)
    d = _inputs()
    d["beta"] = d["beta"][..., :1]
    with pytest.raises(ValueError, match=r"beta must have shape"):
        chunk_kda(**d)
    assert fake.seen == [] and fake.calls == [] and triton_kda.backend_report() == []


def test_default_registry_serves_triton(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    backends.clear_backend_report()
    chunk_kda(**_inputs())
    (entry,) = triton_kda.backend_report()
    assert entry.name == "triton" and entry.op == OP
    if DEVICE == "cpu":
        assert entry.reason == "inputs are on cpu, not a CUDA device"
    else:  # fp32 inputs: every compiled backend (cuda_fast's, where it is discovered) declines or none is registered
        assert entry.reason.startswith(("no CUDA backend takes the call", f"no CUDA backend registered for {OP}"))
    backends.clear_backend_report()


class FakeBwd:
    """A chunk-local backward backend (op `kda_intra_bwd`) whose verifier returns `verdict`; its implementation
    returns zero gradients in the compiled backend's layout (per-v-head dq / dk, one beta partial)."""

    def __init__(self, verdict):
        self.verdict = verdict
        self.calls = 0

    def verify(self, args):
        return self.verdict

    def impl(self, q, k, g, A_log, dt_bias, gl, rstd_q, rstd_k, beta_act, h, dh, v_new, dvb, do, dAqk, dL, plan,
             scale, gate, lower_bound, l2norm):
        self.calls += 1
        TT, HV, K = g.shape
        zeros = torch.zeros(TT, HV, K, device=g.device)
        return zeros, zeros, torch.zeros_like(g), torch.zeros(1, TT, HV, device=g.device), None, None, False


@pytest.mark.parametrize("takes, dtype, cumsums", [(True, torch.float16, 0), (False, torch.float16, 1),
                                                   (True, torch.float32, 1), (False, torch.float32, 1)],
                         ids=["backend-fp16", "triton-fp16", "backend-fp32", "triton-fp32"])
def test_gate_cumsum_only_where_a_triton_kernel_reads_it(takes, dtype, cumsums, monkeypatch):
    """The backward forms the gate cumsum at most once, and not at all where a compiled chunk-local backward takes
    the call (it forms its own) and the WY backward does not read it (16-bit inputs)."""
    from triton_kda import chunk_bwd
    from triton_kda.intra import BWD_OP

    monkeypatch.delenv(ENV_VAR, raising=False)
    backend = FakeBwd((True, "fits") if takes else (False, "declined"))
    reg = Registry(capability_fn=lambda device: (9, 0))
    reg.register(Backend(name="fake_bwd", ops={BWD_OP}, capabilities={(9, 0)}, verifiers={BWD_OP: backend.verify},
                         loader=lambda: backend.impl))
    monkeypatch.setattr(backends, "default_registry", reg)
    calls = []
    original = chunk_bwd.gate_cumsum
    monkeypatch.setattr(chunk_bwd, "gate_cumsum", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    d = make_inputs(1, 20, 1, 2, 16, 16, device=DEVICE, dtype=dtype, requires_grad=True)
    chunk_kda(**d)[0].float().sum().backward()
    assert backend.calls == int(takes) and len(calls) == cumsums
