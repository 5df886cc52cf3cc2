"""cuda_fast's sm90 backend (the compiled CUDA forward): build, C entry point, verifier and registration on any
machine with nvcc; on an sm_90 / sm_100 GPU, the forward against the fp64 oracles (end to end and stage by stage),
with NaN-poisoned outputs and workspaces, run-to-run bit equality, strict causality and the dispatch."""
import itertools
import math
import shutil

import pytest
import torch

from cuda_fast import build, library, sm90, sm90_bwd, sm90_v2
from cuda_fast.library import Library
from cuda_fast.targets import CAPABILITY_TARGETS
from reference.kda import kda_chunk, kda_recurrent
from tests.test_cuda_sm90_bwd import _args as _bwd_args
from tests.utils import assert_close, case_id, make_inputs
from triton_kda import backends, chunk_kda
from triton_kda.backends import ENV_VAR, BackendDeclined, Registry, Selection
from triton_kda.chunk_fwd import plan_chunks

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
on_target = torch.cuda.is_available() and torch.cuda.get_device_capability() in CAPABILITY_TARGETS
needs_target = pytest.mark.skipif(not on_target, reason="needs an sm_90 or sm_100 GPU")


def _prepare(d: dict, **extra):
    """(p, flags, backend args) exactly as chunk_kda builds them for the kwargs dict d: chunk_kda runs with a registry
    selection that records what it is given and what the chosen backend would be called with."""
    seen = {}

    class Recorded(Exception):
        pass

    def record(*call):
        seen["p"], seen["flags"] = call[9], call[10]
        raise Recorded

    def select(op, args, device):
        seen["args"] = args
        return Selection("record", record, "test")

    original = backends.select
    backends.select = select
    try:
        with pytest.raises(Recorded):
            chunk_kda(**d, **extra)
    finally:
        backends.select = original
    return seen["p"], seen["flags"], seen["args"]


KIMI = dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True, use_beta_sigmoid_in_kernel=True,
            use_qk_l2norm_in_kernel=True)


# ---- any machine --------------------------------------------------------------------------------------------------

@needs_nvcc
def test_cubins_compile_for_sm90a_and_sm100a(tmp_path):
    cubins = build.compile_cubins(tmp_path)
    assert sorted(c.name for c in cubins) == ["kda_fwd.sm100a.cubin", "kda_fwd.sm90a.cubin",
                                              "kda_intra_bwd.sm100a.cubin", "kda_intra_bwd.sm90a.cubin"]
    assert all(c.stat().st_size > 10_000 for c in cubins)


@needs_nvcc
def test_library_abi_and_entry_point_validation(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    lib = Library(build.library("90a")).entry("kda_fwd", sm90.FwdArgs)  # checks sizeof(FwdArgs) against the library's
    assert build.library("90a") == next(tmp_path.glob("*.so"))  # cached: no second file

    def call(**fields):
        base = dict(N=1, TT=4, NT=1, H=1, HV=1, K=128, V=128, block_v=64, gate=0)
        with pytest.raises(RuntimeError) as info:
            lib(sm90.FwdArgs(**{**base, **fields}), 0)
        return str(info.value)

    assert "K and V must be 128, got K=64 V=128" in call(K=64)
    assert "HV a multiple of H" in call(H=2, HV=3)
    assert "block_v must be 32 or 64, got 16" in call(block_v=16)
    assert "the softplus gate needs A_log" in call(gate=1)
    assert "the wgmma recurrence takes block_v 64" in call(state_wgmma=1, block_v=32)
    assert "pieces=2 needs pieces <= 32, the wgmma recurrence, the state buffer hs" in call(pieces=2)
    assert "a taper in [0.25, 4] (got 0.1)" in call(pieces=2, state_wgmma=1, hs=16, taper=0.1)
    if not torch.cuda.is_available():
        assert "no current CUDA device" in call()
    else:
        assert "q is null" in call()
        host = torch.zeros(64)
        assert "q is not memory of the current CUDA device" in call(q=host.data_ptr())

    # the 64-token recurrence's entry point (cuda_fast.sm90_v2), bound with its own argument block
    lib64 = Library(build.library("90a")).entry("kda_state64_fwd", sm90_v2.State64Args)

    def call64(**fields):
        with pytest.raises(RuntimeError) as info:
            lib64(sm90_v2.State64Args(**{**dict(N=1, TT=4, NT=1, HV=1), **fields}), 0)
        return str(info.value)

    assert "bad sizes N=1 TT=4 NT=1 HV=0" in call64(HV=0)
    assert ("no current CUDA device" if not torch.cuda.is_available() else "qg is null") in call64()

    # the 64-token intra stage's entry point (cuda_fast.sm90_v2), bound with its own argument block
    intra64 = Library(build.library("90a")).entry("kda_intra64_fwd", sm90_v2.Intra64Args)

    def call_intra64(**fields):
        with pytest.raises(RuntimeError) as info:
            intra64(sm90_v2.Intra64Args(**{**dict(TT=4, NT=1, H=1, HV=1, K=128, V=128), **fields}), 0)
        return str(info.value)

    assert "K and V must be 128, got K=128 V=64" in call_intra64(V=64)
    assert "HV a multiple of H" in call_intra64(H=2, HV=3)
    assert "the softplus gate needs A_log" in call_intra64(gate=1)
    assert ("no current CUDA device" if not torch.cuda.is_available() else "q is null") in call_intra64()


def test_build_reports_a_missing_nvcc(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build, "pip_nvcc", lambda: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(build.BuildError, match="nvcc not found .* pip install nvidia-cuda-nvcc nvidia-cuda-cccl"):
        build.nvcc_path()


def _bf16_args(**extra):
    opts = {k: v for k, v in KIMI.items() if k != "safe_gate"}
    d = make_inputs(1, 40, 2, 4, 128, 128, dtype=torch.bfloat16, device="cpu", **opts)
    return _prepare(d, safe_gate=True, **extra)[2]


@pytest.mark.parametrize("change, reason", [
    (dict(requires_grad=True), "forward only"),
    (dict(return_intermediate_states=True), "return_intermediate_states"),
    (dict(dtype=torch.float16), "must be bfloat16"),
    (dict(K=64), "needs K = V = 128"),
    (dict(HV=70000), "grid limit"),
], ids=["grad", "intermediate-states", "fp16", "K64", "HV70000"])
def test_verifier_declines_with_reason(change, reason):
    args = _bf16_args()
    ok, _ = sm90.verify(args)
    assert ok
    ok, why = sm90.verify({**args, **change})
    assert not ok and reason in why


def test_verifier_declines_fp16_gate_and_misaligned_inputs():
    args = _bf16_args()
    ok, why = sm90.verify({**args, "g": args["g"].half()})
    assert not ok and "g must be bfloat16 or float32" in why
    q = torch.zeros(args["q"].numel() + 1, dtype=torch.bfloat16)[1:].view_as(args["q"])
    ok, why = sm90.verify({**args, "q": q})
    assert not ok and "q's data pointer is not 16-byte aligned" in why


@pytest.mark.parametrize("backend", ["sm90", "sm90_bwd"])
def test_registered_for_sm90_and_sm100_and_build_failure_falls_back(backend, monkeypatch):
    """Both compiled backends (the forward, the chunk-local backward) run on sm_90 and sm_100 only; a library that
    fails to build removes the backend with nvcc's message as the reason."""
    module, args = (sm90, _bf16_args()) if backend == "sm90" else (sm90_bwd, _bwd_args())
    assert module.BACKEND in backends.registered()
    assert module.BACKEND.supports((9, 0)) and module.BACKEND.supports((10, 0)) and not module.BACKEND.supports((8, 9))

    def broken(target):
        raise build.BuildError("nvcc not found")

    monkeypatch.setattr(library, "load_library", broken)
    monkeypatch.setattr(library.torch.cuda, "get_device_capability", lambda *a: (9, 0))
    reg = Registry(capability_fn=lambda device: (9, 0))
    reg.register(module.BACKEND)
    sel = reg.select(module.OP, args, "cpu")
    assert sel.fn is None and "loader failed: BuildError: nvcc not found" in sel.reason


def test_forcing_sm90_on_cpu_inputs_raises(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "sm90")
    d = make_inputs(1, 8, 1, 1, 128, 128, device="cpu")
    with pytest.raises(BackendDeclined, match="not a CUDA device"):
        chunk_kda(**d)


# ---- sm_90 / sm_100 GPU -------------------------------------------------------------------------------------------

# (B, T, H, HV, seqlens, options)
CASES = [
    (2, 130, 2, 4, None, dict(KIMI, initial_state=True)),
    (1, 300, 1, 1, None, dict(KIMI)),
    (1, 253, 1, 2, [0, 1, 17, 100, 0, 135], dict(KIMI, initial_state=True, state_v_first=True)),  # GVA varlen
    (2, 77, 1, 2, None, dict(use_qk_l2norm_in_kernel=True)),  # pre-gated logsigmoid, post-sigmoid beta
    (1, 96, 2, 2, None, dict(gate="strong", use_qk_l2norm_in_kernel=True, initial_state=True)),  # exact path
    (1, 64, 1, 1, None, dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)),  # softplus gate
    (1, 50, 1, 2, None, dict(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, use_qk_l2norm_in_kernel=True)),
]


def _case_inputs(case, seed=0, **extra):
    B, T, H, HV, seqlens, opts = case
    opts = dict(opts)
    safe_gate = opts.pop("safe_gate", False)
    d = make_inputs(B, T, H, HV, 128, 128, dtype=torch.bfloat16, device="cuda", seqlens=seqlens,
                    output_final_state=True, seed=seed, **opts, **extra)
    d["safe_gate"] = safe_gate
    return d


def _run(d, **kw):
    p, flags, args = _prepare(d)
    ok, why = sm90.verify(args)
    assert ok, why
    ins = [d[name] for name in ("q", "k", "v", "g", "beta")]
    return sm90.kda_fwd(*ins, p.A_log, p.dt_bias, d.get("initial_state"), p, flags, **kw)


def _poisoned(d):
    o = torch.full_like(d["v"], math.nan)
    N = len(d["cu_seqlens"]) - 1 if "cu_seqlens" in d else d["q"].shape[0]
    HV = d["v"].shape[2]
    return dict(out=o, final_state=torch.full((N, HV, 128, 128), math.nan, device="cuda"), poison_workspace=True)


TAGS = ["kimi-h0", "kimi", "kimi-gva-varlen-h0-vfirst", "pregated", "strong-exact", "softplus", "negeig"]
CASE_IDS = [case_id(B=c[0], T=c[1], H=c[2], HV=c[3]) + f"-{tag}" for c, tag in zip(CASES, TAGS, strict=True)]


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_fp64_oracle(case):
    d = _case_inputs(case)
    out = _run(d, **_poisoned(d))
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", out.o, ref_o, 5e-3)
    assert_close("final_state", out.final_state, ref_ht, 5e-3)


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[4]], ids=[CASE_IDS[0], CASE_IDS[2], CASE_IDS[4]])
def test_stages_match_chunked_oracle(case):
    """The workspaces against kda_chunk's fp64 intermediates at chunk size 16, rows gathered per chunk."""
    d = _case_inputs(case)
    out = _run(d, poison_workspace=True)
    ref = kda_chunk(**d, chunk_size=16)
    ws = out.workspace
    seqlens = case[4] or [case[1]] * case[0]
    rows, last, chunks_last = [], [], []  # per token: workspace row, its chunk's last token; per chunk: last token
    chunk, start = 0, 0
    for n in seqlens:
        for t in range(n):
            rows.append((chunk + t // 16) * 16 + t % 16)
            last.append(start + min(t // 16 * 16 + 15, n - 1))
        chunks_last += [start + min(c * 16 + 15, n - 1) for c in range(-(-n // 16))]
        chunk, start = chunk + -(-n // 16), start + n
    rows, last, chunks_last = (torch.tensor(x, device="cuda") for x in (rows, last, chunks_last))

    def tokens(x):  # [HV, NT, 16, ...] -> [TT, HV, ...]
        return x.flatten(1, 2)[:, rows].transpose(0, 1)

    assert_close("w", tokens(ws.w), ref.w, 1e-2)
    assert_close("u", tokens(ws.u), ref.u, 1e-2)
    assert_close("Aqk", tokens(ws.aqk), ref.Aqk, 1e-2)
    HV = d["v"].shape[2]
    q, k = (d[name].double().flatten(0, 1).repeat_interleave(HV // d[name].shape[2], 1) for name in ("q", "k"))
    if d.get("use_qk_l2norm_in_kernel"):
        q, k = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    G = ref.g_cumsum
    assert_close("qg", tokens(ws.qg), q * 128 ** -0.5 * torch.exp(G), 1e-2)
    assert_close("kg", tokens(ws.kg), k * torch.exp(G[last] - G), 1e-2)
    assert_close("decay", ws.decay.transpose(0, 1), torch.exp(G[chunks_last]), 1e-5)


@pytest.mark.gpu
@needs_target
def test_deterministic_and_strictly_causal():
    case = CASES[2]
    d = _case_inputs(case, seed=3)
    o1 = _run(d).o
    o2 = _run(d).o
    assert torch.equal(o1, o2)
    # change every token from position 140 on (inside the last sequence, mid-chunk): earlier outputs stay bit-equal
    cut = 140
    e = {name: (t.clone() if isinstance(t, torch.Tensor) else t) for name, t in d.items()}
    for name in ("q", "k", "v", "g", "beta"):
        e[name][:, cut:] = torch.randn_like(e[name][:, cut:].float()).to(e[name].dtype)
    o3 = _run(e).o
    assert torch.equal(o3[:, :cut], o1[:, :cut])
    assert not torch.equal(o3[:, cut:], o1[:, cut:])


@pytest.mark.gpu
@needs_target
def test_auto_dispatch_picks_sm90_for_inference_only(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    d = _case_inputs(CASES[0])
    backends.clear_backend_report()
    with torch.no_grad():
        o, _ = chunk_kda(**d)
    assert backends.backend_report()[-1].name == "sm90"
    ref_o, _ = kda_recurrent(**d)
    assert_close("o", o, ref_o, 5e-3)
    g = _case_inputs(CASES[0], requires_grad=True)
    backends.clear_backend_report()
    chunk_kda(**g)[0].sum().backward()
    assert [e.name for e in backends.backend_report() if e.op == sm90.OP] == ["triton"]


@pytest.mark.parametrize("lens, HV, sms, few", [
    ((8192,), 16, 132, True), ((4096,), 8, 132, True), ((100, 4096), 8, 132, True),
    ((8192,), 32, 132, False), ((2048,), 16, 132, False), ((4095,), 16, 132, False), ((8192,) * 2, 16, 132, False),
    ((8192,), 16, 264, True), ((), 8, 132, False),
], ids=["HV16-T8192", "HV8-T4096", "two-seqs-HV8", "HV32", "T2048", "T4095", "B2-HV16", "264-SMs", "no-seqs"])
def test_few_programs_rule(lens, HV, sms, few):
    """At most half the SMs busy in the 16-token recurrence over a long enough sequence: Triton's pass is faster."""
    assert sm90._few_programs(lens, HV, sms) is few


@pytest.mark.parametrize("lens, faster", [
    ((8192,), False), ((4096,), False), ((8192,) * 2, False), ((8193,), True), ((16384,), True), ((100, 9000), True),
], ids=["T8192", "T4096", "B2-T8192", "T8193", "T16384", "varlen-long"])
def test_split_beats_wgmma_rule(lens, faster):
    """Where Triton splits the sequences: its pass beats the wgmma recurrence past 8192 tokens, whatever N HV."""
    assert sm90._split_beats_wgmma(lens) is faster


@pytest.mark.parametrize("lens, HV, wgmma, forced, P", [
    ((8192,), 32, True, "", 2), ((4096,) * 2, 16, True, "", 2), ((4096,), 16, True, "", 1),
    ((16384,), 32, True, "", 4), ((16384,) * 2, 16, True, "", 4), ((32768,), 32, True, "", 8),
    ((131072,), 16, True, "", 8),
    ((8192,) * 2, 32, True, "", 3), ((4096,) * 2, 32, True, "", 1), ((8192,), 96, True, "", 1),
    ((2048,) * 8, 32, True, "", 1), ((8192,) * 2, 32, True, "4", 4), ((40,), 1, True, "8", 3),
    ((8192, 4096), 16, True, "4", 1), ((8192,), 32, False, "4", 1), ((), 4, True, "4", 1), ((8192,), 32, True, "1", 1),
], ids=["B1-H32", "B2-T4096-H16", "B1-T4096-H16-little-work", "B1-T16384-H32", "B2-T16384-H16", "B1-T32768-H32",
        "B1-T131072-at-most-8", "B2-H32", "B2-T4096-H32-little-work", "B1-H96-many-ctas",
        "B8-T2048-H32-many-ctas", "forced", "at-most-the-chunks", "unequal-lengths", "mma-recurrence", "no-seqs",
        "forced-one"])
def test_pieces_rule(lens, HV, wgmma, forced, P, monkeypatch):
    """The pipelined forward's piece count (132 SMs): pieces of about 4096 tokens (2 to 8) where the recurrence's CTAs
    take at most half the SMs, 3 where they take at most all, over enough work; sequences of one length on the wgmma
    recurrence only, never more pieces than chunks."""
    monkeypatch.setenv(sm90.PIECES_ENV, forced)
    assert sm90.pieces(lens, HV, wgmma, 132) == P


@pytest.mark.parametrize("P, HV, N, forced, value", [
    (2, 32, 1, "", 1.5), (8, 32, 1, "", 1.2), (3, 32, 2, "", 1.0), (2, 32, 1, "0.5", 0.5), (3, 32, 2, "4", 4.0),
], ids=["B1-H32-P2", "B1-H32-P8", "B2-H32-equal", "forced-half", "forced-four"])
def test_taper(P, HV, N, forced, value, monkeypatch):
    """Shorter first pieces where the recurrence takes at most half the SMs (132 here), else equal pieces."""
    monkeypatch.setenv(sm90.TAPER_ENV, forced)
    assert sm90.taper(P, HV, N, 132) == value


@pytest.mark.parametrize("forced", ["0.2", "5", "x", "nan"])
def test_taper_env_rejects_bad_values(forced, monkeypatch):
    monkeypatch.setenv(sm90.TAPER_ENV, forced)
    with pytest.raises(ValueError, match=f"{sm90.TAPER_ENV} must be a number from 0.25 to 4, got"):
        sm90.taper(2, 32, 1, 132)


@pytest.mark.parametrize("forced", ["0", "33", "four", "-2"])
def test_pieces_env_rejects_bad_values(forced, monkeypatch):
    monkeypatch.setenv(sm90.PIECES_ENV, forced)
    with pytest.raises(ValueError, match=f"{sm90.PIECES_ENV} must be an integer from 1 to 32, got"):
        sm90.pieces((8192,), 32, True, 132)


def _plan(lens):
    cu = torch.tensor([0, *itertools.accumulate(lens)])
    return plan_chunks(1, int(cu[-1]), sm90.BT, torch.device("cpu"), cu)


@pytest.mark.parametrize("lens, order", [
    ((5, 300, 0, 17, 300, 1), [1, 4, 3, 0, 5, 2]),  # longest first, ties in sequence order
    ((64, 64, 64), None), ((300, 17, 5, 0), None),  # already non-increasing: sequence order
])
def test_longest_first(lens, order, monkeypatch):
    monkeypatch.delenv(sm90.LONGEST_FIRST_ENV, raising=False)
    got = sm90.longest_first(_plan(lens), torch.device("cpu"))
    assert (got is None) if order is None else (got.dtype == torch.int32 and got.tolist() == order)
    monkeypatch.setenv(sm90.LONGEST_FIRST_ENV, "0")
    assert sm90.longest_first(_plan(lens), torch.device("cpu")) is None


def test_longest_first_env_rejects_bad_values(monkeypatch):
    monkeypatch.setenv(sm90.LONGEST_FIRST_ENV, "yes")
    with pytest.raises(ValueError, match="TRITON_KDA_SM90_LONGEST_FIRST must be 0 or 1, got 'yes'"):
        sm90.longest_first(_plan((1, 2)), torch.device("cpu"))


PIECE_CASES = [0, 3, 4, 6]  # equal-length CASES: h0, pre-gated without h0, the exact path, negative eigenvalues


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("P, taper", [(2, ""), (5, "0.5"), (3, "2"), (32, "")], ids=["P2", "P5-taper0.5", "P3-taper2",
                                                                                   "P32"])
@pytest.mark.parametrize("case", [CASES[i] for i in PIECE_CASES], ids=[CASE_IDS[i] for i in PIECE_CASES])
def test_pieces_match_one_piece_bit_for_bit(case, P, taper, monkeypatch):
    """The pipelined forward (the recurrence over piece p on a second stream beside the intra stage over piece p + 1,
    the state between pieces in fp32) gives the one-piece forward's bits, poisoned outputs all written, with equal
    and tapered pieces (some of them empty); P = 32 is more pieces than these sequences have chunks (one chunk a
    piece)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the pipelined forward runs the wgmma recurrence of the sm_90a library")
    d = _case_inputs(case)
    monkeypatch.setenv(sm90.PIECES_ENV, "1")
    base = _run(d)
    monkeypatch.setenv(sm90.PIECES_ENV, str(P))
    monkeypatch.setenv(sm90.TAPER_ENV, taper)
    out = _run(d, **_poisoned(d))
    assert torch.equal(out.o, base.o)
    assert torch.equal(out.final_state, base.final_state)
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", out.o, ref_o, 5e-3)
    assert_close("final_state", out.final_state, ref_ht, 5e-3)


SKEWED = (1, 900, 1, 2, [3, 197, 1, 16, 500, 0, 64, 17, 102], dict(KIMI, initial_state=True))  # varlen, lengths


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("state", ["wgmma", "mma-64", "mma-32"])
@pytest.mark.parametrize("case", [CASES[2], SKEWED], ids=[CASE_IDS[2], "skewed-varlen-h0"])
def test_longest_first_matches_sequence_order_bit_for_bit(case, state, monkeypatch):
    """The recurrence's CTAs taking the sequences longest first (`sm90.longest_first`, a 1-D rank-major grid) give the
    bits of sequence order, poisoned outputs all written, on both recurrences and both V blocks."""
    if state == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma recurrence is in the sm_90a library")
    monkeypatch.setenv(sm90.STATE_ENV, state.split("-")[0])
    if state != "wgmma":
        monkeypatch.setenv(sm90.BLOCK_V_ENV, state.split("-")[1])
    d = _case_inputs(case)
    monkeypatch.setenv(sm90.LONGEST_FIRST_ENV, "0")
    base = _run(d)
    monkeypatch.setenv(sm90.LONGEST_FIRST_ENV, "1")
    assert sm90.longest_first(_plan(case[4]), d["q"].device) is not None
    out = _run(d, **_poisoned(d))
    assert torch.equal(out.o, base.o) and torch.equal(out.final_state, base.final_state)
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", out.o, ref_o, 5e-3)
    assert_close("final_state", out.final_state, ref_ht, 5e-3)


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("what", ["pieces", "longest-first"])
def test_graph_capture_replays_match_eager(what, monkeypatch):
    """A forward captured in a CUDA graph: the pipelined one (its second stream joins the capture through events) and
    a varlen one (its sequences ordered on the device, from an argsort of the device cu_seqlens); replays on new
    inputs give the eager forward's bits."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv(sm90.LONGEST_FIRST_ENV, raising=False)
    if what == "pieces":
        if torch.cuda.get_device_capability() != (9, 0):
            pytest.skip("the pipelined forward runs the wgmma recurrence of the sm_90a library")
        monkeypatch.setenv(sm90.PIECES_ENV, "4")
    case = CASES[0] if what == "pieces" else SKEWED
    d = _case_inputs(case)
    names = [name for name, t in d.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chunk_kda(**d)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            o, ht = chunk_kda(**d)
        assert backends.backend_report()[-1].name == "sm90"
        for seed in (1, 2):
            e = _case_inputs(case, seed=seed)
            for name in names:
                d[name].copy_(e[name])
            graph.replay()
            ref_o, ref_ht = chunk_kda(**e)
            torch.cuda.synchronize()
            assert torch.equal(o, ref_o) and torch.equal(ht, ref_ht)


@pytest.mark.gpu
@needs_target
def test_verifier_leaves_few_long_sequences_to_triton(monkeypatch):
    """With the mma.sync recurrence (cc 10.0's, or TRITON_KDA_SM90_STATE=mma) few heads over a long sequence go to
    Triton; the wgmma recurrence (cc 9.0's default) keeps them."""
    d = make_inputs(1, 4096, 16, 16, 128, 128, dtype=torch.bfloat16, device="cuda", use_qk_l2norm_in_kernel=True)
    monkeypatch.setenv(sm90.STATE_ENV, "mma")
    ok, why = sm90.verify(_prepare(d)[2])
    assert not ok and "64-token state pass is faster here (N*HV = 16" in why, why
    assert sm90.verify(_prepare({**d, **{k: d[k][:, :2048] for k in ("q", "k", "v", "g", "beta")}})[2])[0]
    monkeypatch.delenv(sm90.STATE_ENV)
    assert sm90.verify(_prepare(d)[2])[0] is (torch.cuda.get_device_capability() == (9, 0))


@pytest.mark.gpu
@needs_target
def test_verifier_leaves_split_sequences_to_triton(monkeypatch):
    """Where Triton's intra-card planner splits the sequences (forced here), its state passing is the faster one:
    always against the mma.sync recurrence, against the wgmma one past 8192 tokens. sm90 declines those calls
    (`sm90_split` takes them on cc 9.0: test_cuda_sm90_split.py)."""
    d = _case_inputs(CASES[1])
    long = make_inputs(1, 8200, 1, 1, 128, 128, dtype=torch.bfloat16, device="cuda", use_qk_l2norm_in_kernel=True)
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP", "1")
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP_CHUNKS", "1")
    ok, why = sm90.verify(_prepare(long)[2])
    assert not ok and "chunk-parallel state passing is faster here" in why
    assert sm90.verify(_prepare(d)[2])[0] is (torch.cuda.get_device_capability() == (9, 0))
    monkeypatch.setenv(sm90.STATE_ENV, "mma")
    ok, why = sm90.verify(_prepare(d)[2])
    assert not ok and "chunk-parallel state passing is faster here" in why
    monkeypatch.setenv("TRITON_KDA_INTRACARD_CP", "0")
    assert sm90.verify(_prepare(d)[2])[0]


@pytest.mark.gpu
@needs_target
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_wgmma_recurrence_matches_oracle_and_mma(case, monkeypatch):
    """The wgmma recurrence (sm_90a's default, `TRITON_KDA_SM90_STATE=wgmma`): the forward against the fp64 oracle with
    poisoned outputs, within bf16 rounding of the mma.sync recurrence (`TRITON_KDA_SM90_STATE=mma`), bit-identical on
    a rerun."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma recurrence is in the sm_90a library")
    d = _case_inputs(case)
    monkeypatch.setenv(sm90.STATE_ENV, "mma")
    monkeypatch.setenv(sm90.BLOCK_V_ENV, "64")
    base = _run(d)
    monkeypatch.setenv(sm90.STATE_ENV, "wgmma")
    out = _run(d, **_poisoned(d))
    ref_o, ref_ht = kda_recurrent(**d)
    assert_close("o", out.o, ref_o, 5e-3)
    assert_close("final_state", out.final_state, ref_ht, 5e-3)
    assert_close("o vs mma", out.o, base.o, 5e-3)
    assert torch.equal(_run(d).o, out.o)
