"""The fp64 oracle (reference/kda.py) and the comparison harness (reference/harness.py, tests/utils.py).

The oracle is checked against itself (recurrent vs chunked form), against fla's pure-torch naive recurrence and
gates, against the definitions of every chunked intermediate, flag by flag, and by gradcheck.
"""
import math

import pytest
import torch

from reference import harness
from reference.kda import kda_beta_ref, kda_chunk, kda_gate_ref, kda_gate_terms, kda_recurrent, l2norm_ref
from tests.utils import DEVICE, assert_close, case_id, make_inputs, max_abs, rel_rmse

F64 = torch.float64
RAGGED = [0, 37, 64, 130, 1]
EXACT = 1e-12  # fp64 agreement between two exact formulations
RAW_FLAGS = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)


def _shape(seqlens=None, B=1, T=None, H=2, HV=4, K=16, V=8):
    T = sum(seqlens) if seqlens is not None else T
    return dict(B=B, T=T, H=H, HV=HV, K=K, V=V, seqlens=seqlens)


def _gqa_expand(x: torch.Tensor, HV: int) -> torch.Tensor:
    return x.repeat_interleave(HV // x.shape[-2], dim=-2)


# ---------------------------------------------------------------------------------------------------------------------
# recurrent form == chunked form

CONSISTENCY = [
    dict(**_shape(RAGGED), gate="logsigmoid"),
    dict(**_shape(RAGGED), gate="safe", lower_bound=-3.0),
    dict(**_shape(RAGGED), gate="strong"),
    dict(**_shape(RAGGED), **RAW_FLAGS),
    dict(**_shape(RAGGED), **RAW_FLAGS, lower_bound=-5.0, allow_neg_eigval=True),
    dict(**_shape(B=2, T=100, H=1, HV=2), gate="logsigmoid"),
]


@pytest.mark.parametrize("state_v_first", [False, True], ids=["kfirst", "vfirst"])
@pytest.mark.parametrize("chunk_size", [32, 64], ids=["BT32", "BT64"])
@pytest.mark.parametrize("params", CONSISTENCY, ids=[case_id(**p) for p in CONSISTENCY])
def test_recurrent_matches_chunk(params, chunk_size, state_v_first):
    d = make_inputs(**params, initial_state=True, state_v_first=state_v_first, output_final_state=True, device=DEVICE)
    o, ht = kda_recurrent(**d)
    r = kda_chunk(**d, chunk_size=chunk_size)
    assert o.dtype == F64 and o.shape == d["v"].shape
    assert_close("o", r.o, o, 1e-10)
    assert_close("final_state", r.final_state, ht, 1e-10)


# ---------------------------------------------------------------------------------------------------------------------
# agreement with fla 0.6.0's pure-torch references (fp32), fed pre-activated inputs


@pytest.mark.parametrize("flags", [False, True], ids=["preactivated", "in_kernel_flags"])
def test_matches_fla_naive_recurrent(flags):
    from fla.ops.kda.naive import naive_recurrent_kda

    d = make_inputs(2, 50, 2, 4, 32, 16, device="cpu", initial_state=True, output_final_state=True, seed=1,
                    **(RAW_FLAGS if flags else {}))
    o, ht = kda_recurrent(**d, scale=0.3)
    q, k, g, beta = d["q"], d["k"], d["g"], d["beta"]
    if flags:
        q, k = l2norm_ref(q), l2norm_ref(k)
        g, beta = kda_gate_ref(g, d["A_log"], d["dt_bias"]), kda_beta_ref(beta)
    o_fla, ht_fla = naive_recurrent_kda(q.float(), k.float(), d["v"], g.float(), beta.float(), scale=0.3,
                                        initial_state=d["initial_state"], output_final_state=True)
    assert_close("o vs fla naive", o_fla, o, 1e-5)
    assert_close("final_state vs fla naive", ht_fla, ht, 1e-5)


def test_gates_match_fla_naive():
    from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate

    d = make_inputs(1, 20, 1, 3, 8, 4, device="cpu", use_gate_in_kernel=True, seed=2)
    g, A_log, dt_bias = d["g"] * 4, d["A_log"], d["dt_bias"]  # wide inputs reach both tails of softplus/sigmoid
    assert_close("softplus gate", naive_kda_gate(g, A_log, dt_bias), kda_gate_ref(g, A_log, dt_bias), 1e-6)
    assert_close("softplus gate, no dt_bias", naive_kda_gate(g, A_log), kda_gate_ref(g, A_log), 1e-6)
    for A in (A_log, None):
        ours = kda_gate_ref(g, A, dt_bias, lower_bound=-2.5)
        assert_close(f"lower-bound gate A_log={A is not None}",
                     naive_kda_lowerbound_gate(g, A, dt_bias, lower_bound=-2.5), ours, 1e-6)
        assert ((ours >= -2.5) & (ours <= 0)).all()


@pytest.mark.parametrize("lower_bound", [None, -5.0], ids=["softplus", "lower_bound"])
def test_gate_terms_sum_to_the_gradients_where_they_share_a_sign(lower_bound):
    """kda_gate_terms: with dgate > 0 and g + dt_bias > 0 every term of dA_log and of ddt_bias is negative, so the sums
    of |terms| are minus autograd's gradients; with dgate of both signs they exceed the gradients' magnitudes."""
    gen = torch.Generator().manual_seed(3)
    g = torch.rand(2, 7, 3, 4, generator=gen, dtype=F64) + 0.1
    A_log = torch.randn(3, generator=gen, dtype=F64).requires_grad_(True)
    dt_bias = (0.1 * torch.rand(12, generator=gen, dtype=F64)).requires_grad_(True)
    gate = kda_gate_ref(g, A_log, dt_bias, lower_bound)
    for dgate, same_sign in ((torch.rand(g.shape, generator=gen, dtype=F64), True),
                             (torch.randn(g.shape, generator=gen, dtype=F64), False)):
        dA, ddt = torch.autograd.grad(gate, [A_log, dt_bias], dgate, retain_graph=True)
        terms = kda_gate_terms(dgate, g, A_log, dt_bias, lower_bound)
        assert terms["A_log"].shape == A_log.shape and terms["dt_bias"].shape == dt_bias.shape
        if same_sign:
            assert_close("dA_log terms", terms["A_log"], -dA, 1e-12)
            assert_close("ddt_bias terms", terms["dt_bias"], -ddt, 1e-12)
        else:
            assert (terms["A_log"] > dA.abs()).all() and (terms["dt_bias"] > ddt.abs()).all()
    assert set(kda_gate_terms(dgate, g, None, dt_bias, -5.0)) == {"dt_bias"}


def test_softplus_gate_is_exact_in_the_tails():
    A_log = torch.zeros(1, dtype=F64)
    x = torch.tensor([[[-800.0, -40.0, 0.0, 40.0, 800.0]]], dtype=F64)
    expected = -torch.tensor([[[0.0, math.exp(-40.0), math.log(2.0), 40.0, 800.0]]], dtype=F64)
    expected[..., 1] = -math.log1p(math.exp(-40.0))
    expected[..., 3] = -(40.0 + math.log1p(math.exp(-40.0)))
    assert_close("softplus tails", kda_gate_ref(x, A_log), expected, 1e-15)


# ---------------------------------------------------------------------------------------------------------------------
# each flag does what it says


def _base(**kw):
    return make_inputs(2, 40, 2, 4, 16, 8, device=DEVICE, initial_state=True, output_final_state=True, seed=3, **kw)


def _differs(a, b, name):
    assert rel_rmse(a, b) > 1e-2, f"{name}: the flag did not change the output (rel diff {rel_rmse(a, b):.2e})"


def test_flag_scale():
    d = _base()
    o_default, _ = kda_recurrent(**d)
    o_explicit, _ = kda_recurrent(**d, scale=16**-0.5)
    o_scaled, ht_scaled = kda_recurrent(**d, scale=0.37)
    assert torch.equal(o_default, o_explicit)
    assert_close("o is linear in scale", o_scaled, o_default * 0.37 / 16**-0.5, EXACT)
    _differs(o_scaled, o_default, "scale")


def test_flag_qk_l2norm():
    d = _base(use_qk_l2norm_in_kernel=True)
    o, ht = kda_recurrent(**d)
    o_pre, ht_pre = kda_recurrent(**{**d, "q": l2norm_ref(d["q"]), "k": l2norm_ref(d["k"]),
                                     "use_qk_l2norm_in_kernel": False})
    assert_close("o", o, o_pre, EXACT)
    assert_close("final_state", ht, ht_pre, EXACT)
    _differs(o, kda_recurrent(**{**d, "use_qk_l2norm_in_kernel": False})[0], "use_qk_l2norm_in_kernel")


@pytest.mark.parametrize("lower_bound", [None, -2.0], ids=["softplus", "lower_bound"])
def test_flag_gate_in_kernel(lower_bound):
    d = _base(use_gate_in_kernel=True, lower_bound=lower_bound)
    o, ht = kda_recurrent(**d)
    gate = kda_gate_ref(d["g"], d["A_log"], d["dt_bias"], lower_bound)
    o_pre, ht_pre = kda_recurrent(**{**d, "g": gate, "use_gate_in_kernel": False})
    assert_close("o", o, o_pre, EXACT)
    assert_close("final_state", ht, ht_pre, EXACT)
    other = {**d, "lower_bound": -2.0} if lower_bound is None else {**d, "lower_bound": None}
    _differs(o, kda_recurrent(**other)[0], "lower_bound")


def test_flag_lower_bound_without_A_log():
    d = _base(use_gate_in_kernel=True, lower_bound=-4.0)
    o_no_A, _ = kda_recurrent(**{**d, "A_log": None})
    gate = -4.0 * torch.sigmoid(d["g"].double() + d["dt_bias"].double().view(4, 16))
    o_pre, _ = kda_recurrent(**{**d, "g": gate, "use_gate_in_kernel": False, "A_log": None})
    assert_close("o", o_no_A, o_pre, EXACT)
    _differs(o_no_A, kda_recurrent(**d)[0], "A_log")


def test_flag_dt_bias():
    d = _base(use_gate_in_kernel=True)
    o_none, _ = kda_recurrent(**{**d, "dt_bias": None})
    o_zero, _ = kda_recurrent(**{**d, "dt_bias": torch.zeros_like(d["dt_bias"])})
    assert torch.equal(o_none, o_zero)
    _differs(kda_recurrent(**d)[0], o_none, "dt_bias")


def test_flag_beta_sigmoid_and_neg_eigval():
    d = _base(use_beta_sigmoid_in_kernel=True)
    o, _ = kda_recurrent(**d)
    o_pre, _ = kda_recurrent(**{**d, "beta": torch.sigmoid(d["beta"].double()), "use_beta_sigmoid_in_kernel": False})
    assert_close("o (beta sigmoid)", o, o_pre, EXACT)
    o_neg, _ = kda_recurrent(**{**d, "allow_neg_eigval": True})
    o_neg_pre, _ = kda_recurrent(**{**d, "beta": 2 * torch.sigmoid(d["beta"].double()),
                                    "use_beta_sigmoid_in_kernel": False})
    assert_close("o (allow_neg_eigval)", o_neg, o_neg_pre, EXACT)
    _differs(o, kda_recurrent(**{**d, "use_beta_sigmoid_in_kernel": False})[0], "use_beta_sigmoid_in_kernel")
    _differs(o_neg, o, "allow_neg_eigval")
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        kda_recurrent(**{**d, "use_beta_sigmoid_in_kernel": False, "allow_neg_eigval": True})


def test_flag_initial_state():
    """The state is affine in (initial_state, v): o(h0, v) = o(h0, 0) + o(0, v), with o(h0, 0) != 0."""
    d = _base()
    o, ht = kda_recurrent(**d)
    o_h0, ht_h0 = kda_recurrent(**{**d, "v": torch.zeros_like(d["v"])})
    o_v, ht_v = kda_recurrent(**{**d, "initial_state": None})
    assert_close("o", o, o_h0 + o_v, EXACT)
    assert_close("final_state", ht, ht_h0 + ht_v, EXACT)
    _differs(o, o_v, "initial_state")
    assert kda_recurrent(**{**d, "output_final_state": False})[1] is None


def test_flag_state_v_first():
    d = _base()
    d_vf = {**d, "initial_state": d["initial_state"].transpose(-1, -2).contiguous(), "state_v_first": True}
    o, ht = kda_recurrent(**d)
    o_vf, ht_vf = kda_recurrent(**d_vf)
    assert torch.equal(o, o_vf)
    assert ht_vf.shape == (2, 4, 8, 16)
    assert torch.equal(ht_vf, ht.transpose(-1, -2))
    r = kda_chunk(**d_vf, chunk_size=32)
    assert_close("chunk final_state (V-first)", r.final_state, ht_vf, EXACT)
    assert r.h.shape[-2:] == (16, 8), "h stays K-first"


def test_varlen_sequences_are_independent():
    d = make_inputs(**_shape(RAGGED), device=DEVICE, initial_state=True, output_final_state=True, seed=4,
                    **RAW_FLAGS)
    o, ht = kda_recurrent(**d)
    cu = d["cu_seqlens_cpu"].tolist()
    for n, (start, end) in enumerate(zip(cu[:-1], cu[1:], strict=True)):
        alone = {**d, "cu_seqlens": None, "initial_state": d["initial_state"][n : n + 1]}
        for name in ("q", "k", "v", "g", "beta"):
            alone[name] = d[name][:, start:end]
        o_n, ht_n = kda_recurrent(**alone)
        assert_close(f"o of sequence {n}", o[:, start:end], o_n, EXACT)
        assert_close(f"final_state of sequence {n}", ht[n : n + 1], ht_n, EXACT)
    assert torch.equal(ht[0], d["initial_state"][0].double()), "a zero-length sequence keeps its initial state"
    _differs(o, kda_recurrent(**{**d, "cu_seqlens": None, "initial_state": d["initial_state"][:1]})[0], "cu_seqlens")


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
def test_causal(form):
    """o at t depends on tokens <= t only: perturbing tokens after t leaves o[:t + 1] unchanged."""
    d = make_inputs(1, 80, 1, 2, 16, 8, device=DEVICE, seed=5, **RAW_FLAGS)
    run = (lambda x: kda_recurrent(**x)[0]) if form == "recurrent" else (lambda x: kda_chunk(**x, chunk_size=64).o)
    t = 40  # mid-chunk
    later = {x: torch.cat([d[x][:, : t + 1], d[x][:, t + 1 :] * -3 + 1], 1) for x in ("k", "v", "g", "beta")}
    o, o_perturbed = run(d), run({**d, **later})
    assert_close("o[:t+1]", o_perturbed[:, : t + 1], o[:, : t + 1], 1e-14)
    _differs(o_perturbed[:, t + 1 :], o[:, t + 1 :], "perturbation")


# ---------------------------------------------------------------------------------------------------------------------
# chunked intermediates satisfy their definitions, chunk by chunk


@pytest.mark.parametrize("chunk_size", [32, 64], ids=["BT32", "BT64"])
def test_chunk_intermediates_match_definitions(chunk_size):
    BT, HV, K, V = chunk_size, 4, 16, 8
    seqlens = [0, 37, 64, 70, 1]
    d = make_inputs(**_shape(seqlens), device=DEVICE, initial_state=True, output_final_state=True, seed=6,
                    **RAW_FLAGS)
    r = kda_chunk(**d, chunk_size=BT)
    q = _gqa_expand(l2norm_ref(d["q"])[0], HV)  # [TT, HV, K]
    k = _gqa_expand(l2norm_ref(d["k"])[0], HV)
    gate = kda_gate_ref(d["g"], d["A_log"], d["dt_bias"])[0]
    beta = kda_beta_ref(d["beta"])[0]
    v = d["v"][0].double()
    scale = K**-0.5
    TT = sum(seqlens)
    assert r.g_cumsum.shape == (TT, HV, K) and r.Aqk.shape == r.Akk.shape == (TT, HV, BT)
    assert r.w.shape == (TT, HV, K) and r.u.shape == r.v_new.shape == (TT, HV, V)
    assert r.h.shape == (sum(-(-n // BT) for n in seqlens), HV, K, V)

    chunk, start = 0, 0
    for n, L in enumerate(seqlens):
        if L:
            assert_close(f"h at the start of sequence {n}", r.h[chunk], d["initial_state"][n], 0.0)
        for c0 in range(start, start + L, BT):
            c1 = min(c0 + BT, start + L)
            m, tag = c1 - c0, f"seq {n} chunk {chunk}"
            G = gate[c0:c1].cumsum(0)  # [m, HV, K]
            assert_close(f"g_cumsum {tag}", r.g_cumsum[c0:c1], G, EXACT)
            causal = torch.ones(m, m, dtype=torch.bool, device=G.device).tril()[:, :, None, None]
            decay = torch.exp(torch.where(causal, G[:, None] - G[None, :], -math.inf))  # [i, j, HV, K]
            Aqk = scale * torch.einsum("ihd,jhd,ijhd->hij", q[c0:c1], k[c0:c1], decay)
            L_ = beta[c0:c1].T[:, :, None] * torch.einsum("ihd,jhd,ijhd->hij", k[c0:c1], k[c0:c1], decay).tril(-1)
            Akk = r.Akk[c0:c1].permute(1, 0, 2)  # [HV, m, BT]
            assert_close(f"Aqk {tag}", r.Aqk[c0:c1].permute(1, 0, 2)[..., :m], Aqk, EXACT)
            assert not r.Aqk[c0:c1, :, m:].any() and not Akk[..., m:].any(), f"{tag}: columns past the chunk end"
            Akk = Akk[..., :m]
            eye = torch.eye(m, dtype=F64, device=G.device)
            assert_close(f"Akk (I + L) == I {tag}", Akk @ (eye + L_), eye.expand(HV, m, m), EXACT)
            assert not Akk.triu(1).any() and torch.equal(Akk.diagonal(dim1=-2, dim2=-1), torch.ones(HV, m).to(Akk))
            bk = beta[c0:c1].T[..., None]
            w = Akk @ (bk * (k[c0:c1] * torch.exp(G)).transpose(0, 1))
            u = Akk @ (bk * v[c0:c1].transpose(0, 1))
            assert_close(f"w {tag}", r.w[c0:c1].transpose(0, 1), w, EXACT)
            assert_close(f"u {tag}", r.u[c0:c1].transpose(0, 1), u, EXACT)
            h = r.h[chunk]
            v_new = u - w @ h
            assert_close(f"v_new {tag}", r.v_new[c0:c1].transpose(0, 1), v_new, EXACT)
            o = scale * (q[c0:c1] * torch.exp(G)).transpose(0, 1) @ h + Aqk @ v_new
            assert_close(f"o {tag}", r.o[0, c0:c1].transpose(0, 1), o, EXACT)
            G_last = G[-1][..., None]  # [HV, K, 1]
            h_next = torch.exp(G_last) * h + (k[c0:c1] * torch.exp(G[-1] - G)).permute(1, 2, 0) @ v_new
            nxt = r.final_state[n] if c1 == start + L else r.h[chunk + 1]
            assert_close(f"next state after {tag}", nxt, h_next, EXACT)
            chunk += 1
        start += L
    assert chunk == r.h.shape[0]


# ---------------------------------------------------------------------------------------------------------------------
# gradients


def _leaves(d, names):
    out = dict(d)
    for name in names:
        out[name] = d[name].detach().to(F64).requires_grad_(True)
    return out


GRAD_CASES = [
    dict(lower_bound=None, allow_neg_eigval=False),
    dict(lower_bound=-3.0, allow_neg_eigval=True),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[case_id(**c) or "softplus" for c in GRAD_CASES])
def test_gradcheck_recurrent(case):
    names = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")
    d = _leaves(make_inputs(**_shape([3, 0, 4], H=1, HV=2, K=4, V=4), device=DEVICE, initial_state=True,
                            output_final_state=True, seed=7, **RAW_FLAGS, **case), names)
    rest = {key: val for key, val in d.items() if key not in names}
    assert torch.autograd.gradcheck(
        lambda *xs: kda_recurrent(**dict(zip(names, xs, strict=True)), **rest), [d[x] for x in names]
    )


def test_gradcheck_chunk():
    names = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")
    d = _leaves(make_inputs(**_shape(B=2, T=9, H=1, HV=2, K=4, V=4), device=DEVICE, initial_state=True,
                            output_final_state=True, seed=8, **RAW_FLAGS), names)
    rest = {key: val for key, val in d.items() if key not in names}

    def run(*xs):
        r = kda_chunk(**dict(zip(names, xs, strict=True)), **rest, chunk_size=4)
        return r.o, r.final_state

    assert torch.autograd.gradcheck(run, [d[x] for x in names])


# ---------------------------------------------------------------------------------------------------------------------
# oracle input checks


def _bad(**changes):
    d = make_inputs(1, 10, 2, 4, 8, 4, device="cpu", seqlens=[4, 6], initial_state=True)
    return {**d, **changes}


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(k=torch.zeros(1, 10, 2, 7)), "`k` has shape"),
        (dict(v=torch.zeros(1, 10, 3, 4)), "multiple of q/k heads"),
        (dict(g=torch.zeros(1, 10, 4, 7)), "`g` has shape"),
        (dict(beta=torch.zeros(1, 10, 2)), "`beta` has shape"),
        (dict(initial_state=torch.zeros(3, 4, 8, 4)), "`initial_state` has shape"),
        (dict(cu_seqlens=torch.tensor([0, 4, 9])), "end at T = 10"),
        (dict(cu_seqlens=torch.tensor([0, 6, 4, 10])), "non-decreasing"),
        (dict(cu_seqlens=torch.tensor([0.0, 10.0])), "int32/int64"),
        (dict(use_gate_in_kernel=True), "`A_log` is required"),
    ],
    ids=["k", "HV", "g", "beta", "initial_state", "cu_end", "cu_order", "cu_dtype", "A_log"],
)
def test_oracle_rejects_bad_input(changes, match):
    with pytest.raises(ValueError, match=match):
        kda_recurrent(**_bad(**changes))


def test_oracle_upcasts_and_accepts_chunk_kda_kwargs():
    d = make_inputs(1, 40, 1, 2, 16, 8, dtype=torch.float16, device=DEVICE, seqlens=[15, 25], initial_state=True)
    o, _ = kda_recurrent(**d, safe_gate=True, chunk_size=64, disable_recompute=True, return_intermediate_states=True)
    o32, _ = kda_recurrent(**{name: x.float() if torch.is_tensor(x) and x.is_floating_point() else x
                              for name, x in d.items()})
    assert o.dtype == F64 and o.device == d["q"].device
    assert torch.equal(o, o32)


# ---------------------------------------------------------------------------------------------------------------------
# the harness itself


def test_metrics():
    ref = torch.tensor([3.0, 4.0])
    assert rel_rmse(torch.tensor([3.0, 4.0]), ref) == 0.0
    assert rel_rmse(torch.tensor([3.0, 5.0]), ref) == pytest.approx(0.2)
    assert rel_rmse(torch.tensor([0.0, 2.0]), torch.zeros(2)) == pytest.approx(2.0)  # absolute when ||ref|| == 0
    assert max_abs(torch.tensor([3.0, 5.5]), ref) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="shape mismatch"):
        rel_rmse(torch.zeros(3), torch.zeros(2))


def test_assert_close():
    ref = torch.arange(1.0, 13.0).reshape(3, 4)
    assert_close("same", ref.half(), ref, 1e-3)
    with pytest.raises(AssertionError, match=r"x \(3, 4\).*rel RMSE .*worst at \(2, 1\): actual 10.5, ref 10.0"):
        assert_close("x", torch.where(ref == 10, 10.5, ref), ref, 1e-3)
    with pytest.raises(AssertionError, match="atol_max"):
        assert_close("x", ref + 1e-3, ref, 1e-3, atol_max=1e-4)
    with pytest.raises(AssertionError, match="shape"):
        assert_close("x", ref.T, ref, 1.0)
    with pytest.raises(AssertionError, match=r"non-finite.*first at \(0, 2\): actual nan"):
        assert_close("x", torch.where(ref == 3, math.nan, ref), ref, 1.0)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close("x", ref, torch.where(ref == 3, math.inf, ref), 1.0)
    both = torch.where(ref == 3, math.nan, torch.where(ref == 4, -math.inf, ref))
    assert_close("matching non-finite", both, both.clone(), 0.0)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close("x", both.nan_to_num(nan=math.nan, neginf=math.inf), both, 1.0)


@pytest.mark.parametrize("gate", ["logsigmoid", "safe", "strong", "raw"])
def test_make_inputs(gate):
    kw = dict(seqlens=[5, 0, 11], gate=gate, use_gate_in_kernel=gate == "raw", initial_state=True,
              state_v_first=True, dtype=torch.float16, device="cpu", lower_bound=-2.0 if gate == "safe" else None)
    d = make_inputs(1, 16, 2, 4, 8, 6, **kw)
    assert d["q"].shape == d["k"].shape == (1, 16, 2, 8) and d["v"].shape == (1, 16, 4, 6)
    assert d["g"].shape == (1, 16, 4, 8) and d["beta"].shape == (1, 16, 4)
    assert all(d[x].dtype == torch.float16 for x in ("q", "k", "v", "g", "beta"))
    assert d["initial_state"].shape == (3, 4, 6, 8) and d["initial_state"].dtype == torch.float32
    assert d["cu_seqlens"].tolist() == [0, 5, 5, 16] and d["cu_seqlens"].dtype == torch.int64
    assert torch.equal(d["cu_seqlens_cpu"], d["cu_seqlens"].cpu())
    assert_close("q is unit-norm", d["q"].float().norm(dim=-1), torch.ones(1, 16, 2), 1e-3)
    assert ((d["beta"] > 0) & (d["beta"] < 1)).all()
    g = d["g"].float()
    if gate == "raw":
        assert d["A_log"].shape == (4,) and d["dt_bias"].shape == (32,) and d["A_log"].dtype == torch.float32
        assert (g > 0).any() and (kda_gate_ref(g, d["A_log"], d["dt_bias"]) <= 0).all()
    else:
        assert (g <= 0).all() and "A_log" not in d
    if gate == "safe":
        assert (g >= -2.0).all() and (g < 0).all()
    if gate == "strong":
        assert (g <= -20).any() and (g >= -60).all()
    again = make_inputs(1, 16, 2, 4, 8, 6, **kw)
    other = make_inputs(1, 16, 2, 4, 8, 6, **kw, seed=1)
    assert all(torch.equal(d[x], again[x]) for x in ("q", "k", "v", "g", "beta", "initial_state"))
    assert not torch.equal(d["v"], other["v"])


def test_make_inputs_flags_and_grad():
    d = make_inputs(2, 8, 1, 2, 4, 4, device="cpu", use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                    use_gate_in_kernel=True, allow_neg_eigval=True, initial_state=True, requires_grad=True)
    assert d["q"].norm(dim=-1).max() > 1.2, "raw q when the kernel normalises"
    assert (d["beta"] < 0).any(), "beta logits when the kernel applies the sigmoid"
    assert all(d[x].requires_grad and d[x].is_leaf for x in ("q", "k", "v", "g", "beta", "initial_state", "A_log"))
    assert d["allow_neg_eigval"] and "cu_seqlens" not in d and "lower_bound" not in d
    with pytest.raises(ValueError, match="sum\\(seqlens\\)"):
        make_inputs(1, 9, 1, 2, 4, 4, seqlens=[3, 4], device="cpu")
    with pytest.raises(ValueError, match="'raw'"):
        make_inputs(1, 8, 1, 2, 4, 4, gate="raw", device="cpu")
    with pytest.raises(ValueError, match="multiple"):
        make_inputs(1, 8, 2, 3, 4, 4, device="cpu")


def test_case_id():
    assert case_id(B=2, T=130, H=2, HV=4, K=64, V=32, dtype=torch.float32) == "B2-T130-H2-HV4-K64-V32-fp32"
    assert (case_id(seqlens=[0, 37], gate="strong", use_qk_l2norm_in_kernel=True, state_v_first=False,
                    lower_bound=-5.0, chunk_size=32, dtype=torch.bfloat16)
            == "seqlens=0,37-strong-l2norm-lb-5.0-BT32-bf16")


def test_pool_and_ratio_spread():
    """`pool` sums squared errors and references over cases; `ratio_spread` is the jackknife standard error of the
    pooled ratio, relative to it: 0 for identical cases, and for ratios 1 and 3 on equal references the pooled ratio
    sqrt(5) moves to 3 or 1 as either case is left out: a standard error of sqrt(1/2 (1 + 1)) = 1, 1 / sqrt(5)."""
    case = lambda e_ours, e_fla: {"ours": {"dA_log": (e_ours, 1.0)}, "fla": {"dA_log": (e_fla, 1.0)}}
    same = [case(4.0, 1.0)] * 3
    assert harness.pool(same) == {"ours": {"dA_log": 2.0}, "fla": {"dA_log": 1.0}}
    assert harness.ratio_spread(same, "ours", "fla", "dA_log") == 0.0
    assert harness.ratio_spread(same[:1], "ours", "fla", "dA_log") == 0.0
    two = [case(1.0, 1.0), case(9.0, 1.0)]
    assert math.isclose(harness.pool(two)["ours"]["dA_log"], math.sqrt(5.0))
    assert math.isclose(harness.ratio_spread(two, "ours", "fla", "dA_log"), 1 / math.sqrt(5.0))
