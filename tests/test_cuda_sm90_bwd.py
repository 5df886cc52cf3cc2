"""cuda_fast's sm90_bwd backend (the compiled chunk-local, gate and, where H == HV, q/k backward): verifier,
registration and the C entry point's checks on any machine with nvcc; on an sm_90 / sm_100 GPU, the kernel against
an fp64 evaluation of its formulas (NaN-poisoned outputs; its error beside the Triton kernels' on the same inputs),
bf16 training gradients against the fp64 recurrent oracle (beside the Triton backward's error on the same inputs),
bit-identical reruns and the report."""
import math
import shutil

import pytest
import torch

from cuda_fast import build, sm90_bwd
from cuda_fast.library import Library
from cuda_fast.targets import CAPABILITY_TARGETS
from reference.kda import kda_gate_ref, l2norm_ref
from tests.test_chunk_bwd import LEAVES, _cotangents, _kernel_grads, _oracle_grads
from tests.utils import DEVICE, assert_close, case_id, make_inputs, rel_rmse
from triton_kda import backends, chunk_kda
from triton_kda.backends import Selection
from triton_kda.configs import precision_of
from triton_kda.gate import GATE_LOWER_BOUND, GATE_NONE, gate_bwd, gate_cumsum
from triton_kda.intra import BWD_OP, intra_local_bwd
from triton_kda.qk import qk_bwd
from triton_kda.wy import WYBwdOut

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
on_target = torch.cuda.is_available() and torch.cuda.get_device_capability() in CAPABILITY_TARGETS
needs_target = pytest.mark.skipif(not on_target, reason="needs an sm_90 or sm_100 GPU")

BF16 = torch.bfloat16


def _args(**change):
    """The verifier's view of a bf16 training call at K = V = 128 (dtype-only stand-ins for the tensors)."""
    t = torch.empty(0, dtype=BF16)
    return {**dict(q=t, k=t, g=t, h=t, dh=t, do=t, v_new=t, K=128, V=128, BT=64, HV=4, state_v_first=False,
                   span=False),
            **change}


# ---- any machine --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, reason", [
    (dict(q=torch.empty(0, dtype=torch.float16)), "q must be bfloat16"),
    (dict(h=torch.empty(0)), "h must be bfloat16"),
    (dict(g=torch.empty(0)), "g must be bfloat16"),
    (dict(K=64, V=64), "needs K = V = 128 or 256"),
    (dict(V=256), "needs K = V = 128 or 256"),
    (dict(K=192, V=192), "needs K = V = 128 or 256"),
    (dict(BT=32), "needs 64-token chunks"),
    (dict(state_v_first=True), "state_v_first"),
    (dict(span=True), "spanning gate-gradient form"),
    (dict(HV=70000), "grid limit"),
    (dict(k=torch.zeros(9, dtype=BF16)[1:]), "k's data pointer is not 16-byte aligned"),
    (dict(g=torch.zeros(9, dtype=BF16)[1:]), "g's data pointer is not 16-byte aligned"),
], ids=["fp16", "fp32-state", "fp32-gate", "K64", "V256", "K192", "BT32", "vfirst", "span", "HV70000", "k-misaligned",
        "g-misaligned"])
def test_verifier_declines_with_reason(change, reason):
    assert sm90_bwd.verify(_args())[0] and sm90_bwd.verify(_args(K=256, V=256))[0]
    ok, why = sm90_bwd.verify(_args(**change))
    assert not ok and reason in why


def test_backward_outside_its_scope_runs_triton_and_says_why():
    """fp32, K = V = 16: Triton's chunk-local kernel runs (on a CPU: the inputs are not on a CUDA device)."""
    d = make_inputs(1, 40, 1, 2, 16, 16, device=DEVICE, requires_grad=True)
    backends.clear_backend_report()
    chunk_kda(**d)[0].sum().backward()
    report = [e for e in backends.backend_report() if e.op == BWD_OP]
    assert [e.name for e in report] == ["triton"]
    if DEVICE == "cpu":
        assert report[0].reason == "inputs are on cpu, not a CUDA device"
    elif on_target:
        assert "sm90_bwd: verifier: q must be bfloat16, got torch.float32" in report[0].reason


@needs_nvcc
def test_entry_point_validation(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    entry = Library(build.library("90a")).entry("kda_intra_bwd", sm90_bwd.IntraBwdArgs)  # checks the struct size

    def call(**fields):
        base = dict(TT=4, NT=1, H=1, HV=1, K=128, V=128, BT=64)
        with pytest.raises(RuntimeError) as info:
            entry(sm90_bwd.IntraBwdArgs(**{**base, **fields}), 0)
        return str(info.value)

    assert "needs K = V = 128 or 256 and BT = 64, got K=64 V=128 BT=64" in call(K=64)
    assert "got K=256 V=128" in call(K=256)
    assert "BT=32" in call(BT=32)
    assert "HV a multiple of H" in call(H=2, HV=3)
    assert "qk_final needs H == HV" in call(H=1, HV=2, qk_final=1)
    assert "bad gate arguments: gate=3" in call(gate=3)
    assert "dA_log_part null" in call(gate=1, A_log=8)  # a parameter without its partial
    assert "gate=0" in call(dt_bias=8, ddt_bias_part=8)  # the parameters only go with the in-kernel gate
    # then the pointer checks shared with kda_fwd (common.cuh, tested in test_cuda_sm90.py)
    assert ("q is null" if torch.cuda.is_available() else "no current CUDA device") in call()


# ---- sm_90 / sm_100 GPU -------------------------------------------------------------------------------------------

KIMI = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True)
# (B, T, H, HV, K = V, seqlens, options)
CASES = [
    (1, 304, 2, 4, 128, [13, 0, 150, 64, 77], dict(KIMI, initial_state=True, output_final_state=True)),  # GVA varlen
    (2, 130, 1, 2, 128, None, dict(gate="strong", use_qk_l2norm_in_kernel=True, initial_state=True,
                                   output_final_state=True)),  # a quarter of the channels takes the exact sums
    (2, 256, 2, 2, 128, None, dict(use_qk_l2norm_in_kernel=True)),  # pre-gated logsigmoid
    (1, 200, 2, 2, 128, None, dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)),  # softplus gate
    (1, 304, 2, 2, 128, [13, 150, 64, 77], dict(KIMI)),  # varlen, H == HV: the q/k backward in the kernel
    # K = V = 256: four 64-column parts of K per chunk (clusters of four where H == HV)
    (1, 304, 2, 2, 256, [13, 150, 64, 77], dict(KIMI, initial_state=True, output_final_state=True)),
    (1, 200, 1, 2, 256, None, dict(gate="strong", use_qk_l2norm_in_kernel=True)),  # GVA, exact sums
    (2, 130, 2, 2, 256, None, dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)),  # softplus gate
]
TAGS = ["kimi-gva-varlen-h0", "strong-exact-h0", "pregated", "softplus", "kimi-varlen", "kimi-varlen-h0",
        "strong-exact-gva", "softplus"]
CASE_IDS = [case_id(B=c[0], T=c[1], H=c[2], HV=c[3], K=c[4]) + f"-{tag}" for c, tag in zip(CASES, TAGS, strict=True)]
def _inputs(case, seed=0):
    """bf16 inputs of a case (every tensor a leaf that requires grad) and test_chunk_bwd's cotangents."""
    B, T, H, HV, K, seqlens, opts = case
    d = make_inputs(B, T, H, HV, K, K, dtype=BF16, device="cuda", seqlens=seqlens, seed=seed, **opts)
    for name in LEAVES:
        if name in d:
            d[name].requires_grad_(True)
    return (d, *_cotangents(d, seed))


def _grads(d, do, dht, disable_recompute=False):
    return _kernel_grads(d, 64, disable_recompute, do, dht)


def _captured(monkeypatch, d, do, dht) -> list:
    """Run a training step whose chunk-local backward must be sm90_bwd's; returns its arguments and its outputs
    (written into NaN-filled buffers)."""
    seen = []
    original = backends.select

    def select(op, args, device):
        sel = original(op, args, device)
        if op != BWD_OP:
            return sel
        assert sel.name == sm90_bwd.NAME, sel.reason

        def record(*call):
            q, _, g, A_log, dt_bias, *_, plan, _, gate, _, _ = call
            out = sm90_bwd.grads_like(q, g, plan.NT, has_a_log=gate > 0 and A_log is not None,
                                      has_dt_bias=gate > 0 and dt_bias is not None, fill=math.nan)
            res = sel.fn(*call, out=out)
            seen.append((call, res))
            return res

        return Selection(sel.name, record, sel.reason)

    monkeypatch.setattr(backends, "select", select)
    _grads(d, do, dht)
    monkeypatch.setattr(backends, "select", original)
    assert len(seen) == 1
    return seen[0]


def _gate_act_bwd(dgate, g, A_log, dt_bias, gate: int, lower_bound):
    """fp64 (dg, dA_log, ddt_bias) from dgate [TT, HV, K]: autograd through the oracle's gate activation
    (`reference.kda.kda_gate_ref`), None for a parameter that is absent."""
    if gate == GATE_NONE:
        return dgate, None, None
    leaves = [x.detach().double().requires_grad_(True) if x is not None else None for x in (g, A_log, dt_bias)]
    y = kda_gate_ref(*leaves, lower_bound=lower_bound if gate == GATE_LOWER_BOUND else None)
    grads = torch.autograd.grad(y, [x for x in leaves if x is not None], dgate)
    it = iter(grads)
    return tuple(next(it) if x is not None else None for x in leaves)


def _stage_ref(call) -> dict:
    """fp64 evaluation of the chunk-local backward's formulas (triton_kda.intra._kda_intra_bwd_kernel's docstring)
    with the exact gate cumsum G of g and exact decays 2^(G_i - G_j), chunk by chunk, and of the gate backward after
    it (`_kda_gate_bwd_kernel`): dq, dk [TT, HV, K] (where H == HV: [TT, H, K] through the l2norm backward), dbeta
    [TT, HV], dg [TT, HV, K], dA_log [HV] and ddt_bias [HV * K] (None without them)."""
    q, k, g, A_log, dt_bias, gl, rstd_q, rstd_k, beta, h, dh, v_new, dvb, do, dAqk, dL, plan, scale, gate, lb, l2 = call
    f64 = [x.double() for x in (q, k, gl, rstd_q, rstd_k, beta, h, dh, v_new, dvb, do, dAqk, dL)]
    q, k, gl, rstd_q, rstd_k, beta, h, dh, v_new, dvb, do, dAqk, dL = f64
    TT, H, K = q.shape
    HV = g.shape[1]
    grp = HV // H
    act = g.double() if gate == GATE_NONE else kda_gate_ref(
        *(x.double() if x is not None else None for x in (g, A_log, dt_bias)),
        lower_bound=lb if gate == GATE_LOWER_BOUND else None)
    out = {name: torch.zeros(TT, HV, K, dtype=torch.float64, device=q.device) for name in ("dq", "dk", "dgate")}
    out["dbeta"] = torch.zeros(TT, HV, dtype=torch.float64, device=q.device)
    cu = plan.cu_seqlens.tolist()
    for c, (seq, local) in enumerate(plan.chunk_indices.tolist()):
        t0 = cu[seq] + 64 * local
        n = min(64, cu[seq + 1] - t0)
        rows = slice(t0, t0 + n)
        G = (act[rows].cumsum(0) / math.log(2)).transpose(0, 1)                       # [HV, n, K]
        qn = (q[rows].repeat_interleave(grp, 1) * (rstd_q[rows] * scale)[..., None]).transpose(0, 1)
        kn = (k[rows].repeat_interleave(grp, 1) * rstd_k[rows][..., None]).transpose(0, 1)
        b = beta[rows].transpose(0, 1)[..., None]                                     # [HV, n, 1]
        S, dS = h[c], dh[c]                                                           # [HV, K, V]
        dA, dLc = dAqk[rows, :, :n].transpose(0, 1), dL[rows, :, :n].transpose(0, 1)  # [HV, n (i), n (j)]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()[None, :, :, None]
        Dij = torch.exp2(torch.where(causal, G[:, :, None] - G[:, None, :], -math.inf))  # [HV, i, j, K]
        Rq = torch.einsum("hij,hjk,hijk->hik", dA, kn, Dij)
        RL = torch.einsum("hij,hjk,hijk->hik", dLc, kn, Dij)
        C = torch.einsum("hij,hik,hijk->hjk", dA, qn, Dij) + torch.einsum("hij,hik,hijk->hjk", dLc, b * kn, Dij)
        dqg = torch.einsum("thv,hkv->htk", do[rows], S)
        X = -torch.einsum("thv,hkv->htk", dvb[rows], S)
        dkg = torch.einsum("thv,hkv->htk", v_new[rows], dS)
        eG, eGl = torch.exp2(G), torch.exp2(gl[c][:, None] - G)
        dqn = dqg * eG + Rq
        E = kn * (X * b * eG + b * RL - C) + qn * dqn
        E[:, n - 1] += (S * dS).sum(-1) * torch.exp2(gl[c])
        out["dq"][rows] = (dqn * scale).transpose(0, 1)
        out["dk"][rows] = (X * b * eG + dkg * eGl + b * RL + C).transpose(0, 1)
        F = dkg * eGl * kn
        # dgate_m = sum_{i >= m} E_i + sum_{j < m} F_j
        out["dgate"][rows] = (E.flip(1).cumsum(1).flip(1) + F.cumsum(1) - F).transpose(0, 1)
        out["dbeta"][rows] = (kn * (X * eG + RL)).sum(-1).transpose(0, 1)
    out["dg"], out["dA_log"], out["ddt_bias"] = _gate_act_bwd(out.pop("dgate"), g, A_log, dt_bias, gate, lb)
    if H == HV:
        out["dq"], out["dk"] = (_l2norm_bwd(x, out[name]) if l2 else out[name] for x, name in ((q, "dq"), (k, "dk")))
    return out


def _l2norm_bwd(x, d):
    """fp64 gradient w.r.t. x [TT, H, K] from d, the gradient w.r.t. the oracle's `l2norm_ref(x)`."""
    leaf = x.detach().double().requires_grad_(True)
    return torch.autograd.grad(l2norm_ref(leaf), leaf, d)[0]


# the kernel's error on the captured inputs, against the Triton kernels' on the same inputs: at most TRITON_FACTOR
# times it or STAGE_FLOOR (relative RMSE). H100, 2026-11-25 (8cb9adc, before the gate backward joined the kernel):
# cuda / triton 0.19-0.54 on dq, dk, dE, dbeta (its dvb products carry 16 mantissa bits, TF32 10), 0.88-1.00 on dF
# (1.2e-7 to 1.4e-7). dg, dA_log and ddt_bias (since 7492932) passed on the H100 at cfa1513; their ratios were not
# printed
TRITON_FACTOR = 1.5
STAGE_FLOOR = 1e-5


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_kernel_matches_fp64_stage_and_triton(case, monkeypatch):
    monkeypatch.delenv("TRITON_KDA_SM90_BWD", raising=False)
    d, do, dht = _inputs(case)
    call, got = _captured(monkeypatch, d, do, dht)
    ref = _stage_ref(call)
    (q, k, g, A_log, dt_bias, gl, rstd_q, rstd_k, beta, h, dh, v_new, dvb, do_, dAqk, dL, plan, scale, gate, lb,
     l2) = call
    Gc = gate_cumsum(g, A_log, dt_bias, plan, 64, gate=gate, lower_bound=lb, prec=precision_of(BF16))
    lo = intra_local_bwd(q, k, Gc, gl, rstd_q, rstd_k, beta, h, dh, v_new, WYBwdOut(None, dvb, dAqk, dL, None),
                         do_, scale, plan, 64, gate=gate, state_v_first=False, prec="tf32", prec_state="tf32",
                         span=False)
    dg, dA_log_part, ddt_bias_part = gate_bwd(g, A_log, dt_bias, lo.dD, lo.dW, plan, 64, 0, gate=gate, lower_bound=lb)
    assert got.qk_final == (q.shape[1] == g.shape[1])
    tri_dq, tri_dk = ((qk_bwd(x, d, use_qk_l2norm_in_kernel=l2) for x, d in ((q, lo.dq), (k, lo.dk))) if got.qk_final
                      else (lo.dq, lo.dk))
    pairs = dict(dq=(got.dq, tri_dq), dk=(got.dk, tri_dk), dbeta=(got.dbeta.sum(0), lo.dbeta.sum(0)), dg=(got.dg, dg))
    if ref["dA_log"] is not None:
        pairs["dA_log"] = (got.dA_log_part.sum((0, 1)), dA_log_part.sum((0, 1)))
    if ref["ddt_bias"] is not None:
        pairs["ddt_bias"] = (got.ddt_bias_part.sum(0).flatten(), ddt_bias_part.sum(0).flatten())
    assert (A_log is not None) == ("dA_log" in pairs) and (dt_bias is not None) == ("ddt_bias" in pairs)
    for name, (cuda, triton) in pairs.items():
        assert_close(name, cuda, ref[name], max(TRITON_FACTOR * rel_rmse(triton.double(), ref[name]), STAGE_FLOOR))


# bf16 gradients against the fp64 oracle (test_chunk_bwd's 16-bit tolerances) and against the Triton backward's
# error on the same inputs: at most GRAD_FACTOR times it. H100, 2026-11-25: cuda / triton 0.96-1.07 (the largest dg
# on the GVA varlen case, 2.95e-3 against 2.77e-3: bf16 rounding of the stored gradient, whose worst element sits at
# -29.4, dominates both). At cfa1513 over seeds 0-3 (docs/benchmarks/scripts/bwd_cuda_errors.py at a24d737): largest
# 1.21, dA_log on the softplus case's seed 0 (this test takes seed 1: 0.58)
GRAD_TOL = dict(q=8e-3, k=8e-3, v=8e-3, g=2e-2, beta=2e-2, A_log=1e-2, dt_bias=1e-2, initial_state=1e-2)
GRAD_FACTOR = 1.25


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_training_grads_match_oracle_and_triton(case, monkeypatch):
    monkeypatch.delenv("TRITON_KDA_SM90_BWD", raising=False)
    d, do, dht = _inputs(case, seed=1)
    backends.clear_backend_report()
    got = _grads(d, do, dht)
    assert [e.name for e in backends.backend_report() if e.op == BWD_OP] == [sm90_bwd.NAME]
    monkeypatch.setenv("TRITON_KDA_SM90_BWD", "0")
    tri = _grads(d, do, dht)
    ref = _oracle_grads(d, do, dht)
    for name, g in got.items():
        bound = min(GRAD_TOL[name], GRAD_FACTOR * rel_rmse(tri[name].double(), ref[name]))
        assert_close(f"d{name}", g, ref[name], bound)


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", [CASES[i] for i in (0, 1, 4, 5)], ids=[CASE_IDS[i] for i in (0, 1, 4, 5)])
def test_recompute_and_repeat_bit_identical(case, monkeypatch):
    """Recompute and disable_recompute give the same gradients bit for bit, and a rerun repeats them."""
    monkeypatch.delenv("TRITON_KDA_SM90_BWD", raising=False)
    d, do, dht = _inputs(case, seed=2)
    runs = [_grads(d, do, dht, disable_recompute=keep) for keep in (False, True, False)]
    for other in runs[1:]:
        for name, g in runs[0].items():
            assert torch.equal(g, other[name]), f"d{name} differs between runs (recompute vs disable_recompute)"
