"""validate_chunk_kda: every error path (type + message fragment) and the KDAProblem of valid calls.

Tiny CPU tensors only; no Triton. The 'meta' device stands in for "another device" and for "contents unreadable".
"""

import inspect
import math

import pytest
import torch

from triton_kda._validate import KDAProblem, validate_chunk_kda
from triton_kda.cp_plan import CPContext

DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def make_args(B=1, T=8, H=2, HV=4, K=16, V=8, dtype=torch.float32, device="cpu"):
    """All arguments of validate_chunk_kda for a valid fixed-length call with chunk_kda's defaults."""
    return dict(
        q=torch.randn(B, T, H, K, dtype=dtype, device=device),
        k=torch.randn(B, T, H, K, dtype=dtype, device=device),
        v=torch.randn(B, T, HV, V, dtype=dtype, device=device),
        g=-torch.rand(B, T, HV, K, device=device),
        beta=torch.rand(B, T, HV, dtype=dtype, device=device),
        scale=None, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
        use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
        lower_bound=None, disable_recompute=False, return_intermediate_states=False, state_v_first=False,
        cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None, use_graph=False, max_num_seqs=None, kwargs={},
    )


def varlen(a, bounds, dtype=torch.int64):
    a["cu_seqlens"] = torch.tensor(bounds, dtype=dtype)


def gate(a, **kwargs):
    a["use_gate_in_kernel"] = True
    a["kwargs"] = kwargs


def meta(t):
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def h0(N=1, HV=4, K=16, V=8, dtype=torch.float32):
    return torch.randn(N, HV, K, V, dtype=dtype)


# (mutation of make_args(), exception type, message fragment)
ERROR_CASES = [
    # call form
    pytest.param(lambda a: a.update(kwargs={"foo": 1, "A_log": None}), TypeError,
                 r"unexpected keyword argument\(s\) \['foo'\]", id="unknown-kwarg"),
    pytest.param(lambda a: a.update(output_final_state=1), TypeError, r"`output_final_state` must be a bool, got int",
                 id="flag-not-bool"),
    pytest.param(lambda a: a.update(kwargs={"transpose_state_layout": "yes"}), TypeError,
                 r"`transpose_state_layout` must be a bool, got str", id="transpose-not-bool"),
    pytest.param(lambda a: a.update(state_v_first=True, kwargs={"transpose_state_layout": True}), ValueError,
                 r"Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`", id="both-layouts"),
    # context parallel (the checks that need a process group run in tests/test_cp.py)
    pytest.param(lambda a: a.update(cp_context=object()), TypeError,
                 r"`cp_context` must be a context from triton_kda.build_cp_context .* got object without the "
                 r"field\(s\) \['group', 'cu_seqlens', 'cu_seqlens_cpu', 'layout'\]", id="cp-context-type"),
    pytest.param(lambda a: a.update(cp_context=CPContext(layout="ring")), ValueError,
                 r"`cp_context.layout` must be 'contiguous' or 'zigzag', got 'ring'", id="cp-context-layout"),
    pytest.param(lambda a: a.update(cp_context=CPContext()), ValueError,
                 r"`cp_context.group` needs an initialized torch.distributed process group", id="cp-context-no-dist"),
    pytest.param(lambda a: a.update(use_graph=True), NotImplementedError, r"`use_graph=True`.*not implemented yet",
                 id="use-graph"),
    pytest.param(lambda a: a.update(max_num_seqs=4), ValueError,
                 r"`max_num_seqs` is only meaningful with `use_graph=True`, got max_num_seqs=4", id="max-num-seqs"),
    pytest.param(lambda a: a.update(q=a["q"].tolist()), TypeError, r"`q` must be a torch.Tensor .*got list",
                 id="q-not-tensor"),
    pytest.param(lambda a: a.update(g=a["g"][0]), ValueError, r"`g` must be 4-D .*got 3-D", id="g-3d"),
    pytest.param(lambda a: a.update(beta=a["beta"][..., None]), ValueError, r"`beta` must be 3-D .*got 4-D",
                 id="beta-4d"),
    pytest.param(lambda a: a.update(q=a["q"][:, :0], k=a["k"][:, :0]), ValueError,
                 r"`q` must have no empty dimension .*tokens T.*shape \[1, 0, 2, 16\]", id="T0"),
    pytest.param(lambda a: a.update(v=a["v"][..., :0]), ValueError,
                 r"`v` must have no empty dimension .*head dim V.*shape \[1, 8, 4, 0\]", id="V0"),
    pytest.param(lambda a: a.update(initial_state=[0.0]), TypeError, r"`initial_state` must be a torch.Tensor",
                 id="h0-not-tensor"),
    pytest.param(lambda a: a.update(initial_state=h0()[0]), ValueError, r"`initial_state` must be 4-D", id="h0-3d"),
    pytest.param(lambda a: a.update(cu_seqlens=[0, 8]), TypeError, r"`cu_seqlens` must be a torch.Tensor",
                 id="cu-not-tensor"),
    pytest.param(lambda a: a.update(cu_seqlens=torch.tensor([[0, 8]])), ValueError, r"`cu_seqlens` must be 1-D",
                 id="cu-2d"),
    pytest.param(lambda a: a.update(cu_seqlens=torch.tensor([0.0, 8.0])), TypeError,
                 r"`cu_seqlens` must have an integer dtype .*got torch.float32", id="cu-float"),
    pytest.param(lambda a: a.update(cu_seqlens=torch.tensor([0])), ValueError,
                 r"`cu_seqlens` must hold at least 2 boundaries .*got 1", id="cu-len1"),
    # fla's checks, fla's text
    pytest.param(lambda a: (a.update(make_args(B=2)), varlen(a, [0, 8])), ValueError,
                 r"The batch size is expected to be 1 rather than 2 when using `cu_seqlens`", id="varlen-B2"),
    pytest.param(lambda a: (varlen(a, [0, 3, 8]), a.update(initial_state=h0(N=3))), ValueError,
                 r"number of initial states .* i\.e\., 2 rather than 3", id="varlen-h0-count"),
    pytest.param(lambda a: a.update(initial_state=h0(dtype=torch.bfloat16)), TypeError,
                 r"initial_state must be in float32, got torch.bfloat16", id="h0-bf16"),
    pytest.param(lambda a: gate(a), ValueError,
                 r"`A_log` must be provided when `use_gate_in_kernel=True` and `lower_bound` is not set",
                 id="no-A_log"),
    pytest.param(lambda a: a.update(kwargs={"chunk_size": 48}), ValueError,
                 r"`chunk_size` must be either 32 or 64 for KDA, got 48\.", id="chunk-48"),
    pytest.param(lambda a: a.update(kwargs={"chunk_size": True}), ValueError,
                 r"`chunk_size` must be either 32 or 64 for KDA, got True\.", id="chunk-bool"),
    pytest.param(lambda a: (gate(a, A_log=torch.zeros(4)), a.update(safe_gate=True)), ValueError,
                 r"`lower_bound` must be specified when `safe_gate=True` and `use_gate_in_kernel=True`",
                 id="safe-gate-no-bound"),
    pytest.param(lambda a: (gate(a), a.update(safe_gate=True, lower_bound=-6.0)), ValueError,
                 r"`lower_bound` must be in the safe range \[-5, 0\), got -6\.0", id="safe-gate-bound-6"),
    pytest.param(lambda a: (gate(a), a.update(safe_gate=True, lower_bound="-1")), TypeError,
                 r"`lower_bound` must be a real number, got str", id="safe-gate-bound-str"),
    pytest.param(lambda a: a.update(allow_neg_eigval=True), ValueError,
                 r"`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`", id="neg-eigval"),
    pytest.param(lambda a: a.update(k=a["k"][:, :, :1]), ValueError,
                 r"q and k must have the same shape, got q=\[1, 8, 2, 16\] vs k=\[1, 8, 1, 16\]", id="k-shape"),
    pytest.param(lambda a: a.update(make_args(K=257)), ValueError,
                 r"key headdim <=256 for KDA, got 257 \(head dim K", id="K257"),
    pytest.param(lambda a: a.update(make_args(HV=3)), ValueError,
                 r"num_v_heads \(HV=3\) must be evenly divisible by num_qk_heads \(H=2\).*head count", id="HV3-H2"),
    pytest.param(lambda a: a.update(g=a["g"][..., :8]), ValueError,
                 r"g must have shape \[B, T, HV, K\]=\[1, 8, 4, 16\], got \[1, 8, 4, 8\]", id="g-shape"),
    pytest.param(lambda a: a.update(beta=a["beta"][:, :, :2]), ValueError,
                 r"beta must have shape \[B, T, HV\]=\[1, 8, 4\], got \[1, 8, 2\]", id="beta-shape"),
    # ours
    pytest.param(lambda a: a.update(v=torch.randn(1, 4, 4, 8)), ValueError,
                 r"`v` must have shape \[B, T, HV, V\] with q's B=1 and T=8, got \[1, 4, 4, 8\]", id="v-time"),
    pytest.param(lambda a: a.update(q=a["q"].long(), k=a["k"].long()), TypeError,
                 r"`q` must be bfloat16, float16 or float32, got torch.int64", id="q-int"),
    pytest.param(lambda a: a.update(k=a["k"].half()), TypeError, r"`k` must have q's dtype torch.float32, got "
                 r"torch.float16", id="k-dtype"),
    pytest.param(lambda a: a.update(v=a["v"].double()), TypeError, r"`v` must have q's dtype torch.float32",
                 id="v-dtype"),
    pytest.param(lambda a: a.update(g=a["g"].double()), TypeError, r"`g` must be bfloat16, float16 or float32, "
                 r"got torch.float64", id="g-fp64"),
    pytest.param(lambda a: a.update(beta=a["beta"].half()), TypeError,
                 r"`beta` must be float32 or q's dtype torch.float32, got torch.float16", id="beta-fp16-q-fp32"),
    pytest.param(lambda a: a.update(k=meta(a["k"])), ValueError, r"`k` must be on q's device cpu, got device meta",
                 id="k-device"),
    pytest.param(lambda a: a.update(g=meta(a["g"])), ValueError, r"`g` must be on q's device cpu, got device meta",
                 id="g-device"),
    pytest.param(lambda a: a.update(beta=meta(a["beta"])), ValueError, r"`beta` must be on q's device",
                 id="beta-device"),
    pytest.param(lambda a: a.update(initial_state=meta(h0())), ValueError, r"`initial_state` must be on q's device",
                 id="h0-device"),
    pytest.param(lambda a: a.update(cu_seqlens=torch.tensor([0, 8], device="meta")), ValueError,
                 r"`cu_seqlens` must be on q's device cpu, got device meta", id="cu-device"),
    pytest.param(lambda a: a.update(initial_state=h0(N=2)), ValueError,
                 r"`initial_state` must have shape \[N, HV, K, V\]=\[1, 4, 16, 8\], got \[2, 4, 16, 8\]",
                 id="h0-shape"),
    pytest.param(lambda a: a.update(initial_state=h0(), state_v_first=True), ValueError,
                 r"`initial_state` must have shape \[N, HV, V, K\] \(state_v_first=True\)=\[1, 4, 8, 16\]",
                 id="h0-shape-v-first"),
    pytest.param(lambda a: a.update(lower_bound=0.5), ValueError, r"`lower_bound` must be a finite negative number",
                 id="bound-positive"),
    pytest.param(lambda a: a.update(lower_bound=-math.inf), ValueError, r"finite negative number .*got -inf",
                 id="bound-inf"),
    pytest.param(lambda a: (gate(a), a.update(safe_gate=True, lower_bound=math.nan)), ValueError,
                 r"safe range \[-5, 0\), got nan", id="safe-gate-bound-nan"),
    pytest.param(lambda a: a.update(lower_bound=True), TypeError, r"`lower_bound` must be a real number, got bool",
                 id="bound-bool"),
    pytest.param(lambda a: gate(a, A_log=torch.zeros(3)), ValueError,
                 r"`A_log` must have HV=4 elements, got 3", id="A_log-numel"),
    pytest.param(lambda a: gate(a, A_log=torch.zeros(4, dtype=torch.int32)), TypeError,
                 r"`A_log` must be bfloat16, float16 or float32, got torch.int32", id="A_log-int"),
    pytest.param(lambda a: gate(a, A_log=[0.0] * 4), TypeError, r"`A_log` must be a torch.Tensor with HV=4 elements",
                 id="A_log-list"),
    pytest.param(lambda a: gate(a, A_log=torch.zeros(4, device="meta")), ValueError,
                 r"`A_log` must be on q's device cpu, got device meta", id="A_log-device"),
    pytest.param(lambda a: gate(a, A_log=torch.zeros(4), dt_bias=torch.zeros(4, 15)), ValueError,
                 r"`dt_bias` must have HV \* K=64 elements, got 60", id="dt_bias-numel"),
    pytest.param(lambda a: a.update(return_intermediate_states=True), ValueError,
                 r"`return_intermediate_states=True` is only allowed inside torch.inference_mode\(\)",
                 id="intermediate-no-inference"),
    pytest.param(lambda a: a.update(cu_seqlens_cpu=torch.tensor([0, 8])), ValueError,
                 r"`cu_seqlens_cpu` was given without `cu_seqlens`", id="cu-cpu-alone"),
    pytest.param(lambda a: (varlen(a, [0, 8]), a.update(cu_seqlens_cpu=torch.tensor([0, 8], device="meta"))),
                 ValueError, r"`cu_seqlens_cpu` must be a CPU tensor, got device meta", id="cu-cpu-device"),
    pytest.param(lambda a: (varlen(a, [0, 8]), a.update(cu_seqlens_cpu=torch.tensor([0, 4, 8]))), ValueError,
                 r"`cu_seqlens_cpu` must have the length of `cu_seqlens` \(2\), got 3", id="cu-cpu-length"),
    pytest.param(lambda a: (varlen(a, [0, 8]), a.update(cu_seqlens_cpu=torch.tensor([0.0, 8.0]))), TypeError,
                 r"`cu_seqlens_cpu` must have an integer dtype", id="cu-cpu-float"),
    pytest.param(lambda a: varlen(a, [1, 8]), ValueError, r"`cu_seqlens` must start at 0, got \[1, 8\]",
                 id="cu-start"),
    pytest.param(lambda a: varlen(a, [0, 5, 3, 8], dtype=torch.int32), ValueError,
                 r"`cu_seqlens` must be non-decreasing, got cu_seqlens\[2\]=3 < cu_seqlens\[1\]=5", id="cu-decreasing"),
    pytest.param(lambda a: varlen(a, [0, 4, 7]), ValueError,
                 r"`cu_seqlens` must end at T=8 \(the token count of q\), got 7", id="cu-end"),
    pytest.param(lambda a: (varlen(a, [0, 8]), a.update(cu_seqlens_cpu=torch.tensor([0, 9], dtype=torch.int32))),
                 ValueError, r"`cu_seqlens_cpu` must end at T=8 .*got 9", id="cu-cpu-contents"),
    pytest.param(lambda a: a.update(scale="0.5"), TypeError,
                 r"`scale` must be a real number or a 0-d tensor, got str", id="scale-str"),
    pytest.param(lambda a: a.update(scale=torch.ones(2)), ValueError,
                 r"`scale` must be a real number or a 0-d tensor, got a tensor of shape \[2\]", id="scale-1d"),
    pytest.param(lambda a: a.update(scale=torch.tensor(1j)), TypeError, r"`scale` must be a real number, got a 0-d "
                 r"tensor of dtype torch.complex64", id="scale-complex"),
    pytest.param(lambda a: a.update(scale=0), ValueError, r"`scale` must be finite and non-zero, got 0\.0",
                 id="scale-zero"),
    pytest.param(lambda a: a.update(scale=math.nan), ValueError, r"`scale` must be finite and non-zero, got nan",
                 id="scale-nan"),
]


@pytest.mark.parametrize("mutate, exc, match", ERROR_CASES)
def test_error(mutate, exc, match):
    args = make_args()
    mutate(args)
    with pytest.raises(exc, match=match):
        validate_chunk_kda(**args)


def test_error_intermediate_states_with_disable_recompute():
    args = make_args()
    args.update(return_intermediate_states=True, disable_recompute=True)
    with torch.inference_mode(), pytest.raises(ValueError, match=r"requires `disable_recompute=False`"):
        validate_chunk_kda(**args)


def test_error_varlen_long_cu_seqlens_preview():
    args = make_args(T=40)
    varlen(args, list(range(0, 20)) + [19, 18, 40])
    with pytest.raises(ValueError, match=r"cu_seqlens\[21\]=18 < cu_seqlens\[20\]=19 in \[0, 1, 2, 3, 4, 5, 6, 7, "
                                         r"\.\.\.\] \(23 values\)"):
        validate_chunk_kda(**args)


def test_fla_order_chunk_size_after_A_log():
    """Two faults at once: the first one fla checks (A_log) is the one reported."""
    args = make_args()
    gate(args, chunk_size=48)
    with pytest.raises(ValueError, match=r"`A_log` must be provided"):
        validate_chunk_kda(**args)


@pytest.mark.parametrize("B, T, H, HV, K, V, dtype", [
    pytest.param(*shape, dtype, id=f"B{shape[0]}-T{shape[1]}-H{shape[2]}-HV{shape[3]}-K{shape[4]}-V{shape[5]}-"
                                   f"{DTYPES[dtype]}")
    for shape in [(2, 8, 2, 2, 16, 8), (1, 5, 1, 4, 256, 3), (3, 1, 2, 6, 1, 1)]
    for dtype in (torch.float32, torch.bfloat16)
])
def test_valid_fixed_length(B, T, H, HV, K, V, dtype):
    args = make_args(B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    args["initial_state"] = h0(N=B, HV=HV, K=K, V=V)
    assert validate_chunk_kda(**args) == KDAProblem(
        B=B, T=T, H=H, HV=HV, K=K, V=V, N=B, chunk_size=64, scale=K ** -0.5, A_log=None, dt_bias=None,
        state_v_first=False, seqlens_cpu=None)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("with_cpu_copy", [False, True], ids=["cu", "cu+cpu"])
def test_valid_varlen(index_dtype, with_cpu_copy):
    args = make_args(T=13, H=2, HV=4, K=16, V=8)
    bounds = [0, 5, 5, 13]
    varlen(args, bounds, dtype=index_dtype)
    if with_cpu_copy:
        args["cu_seqlens_cpu"] = torch.tensor(bounds, dtype=index_dtype)
    args["initial_state"] = h0(N=3)
    problem = validate_chunk_kda(**args)
    assert (problem.B, problem.T, problem.N) == (1, 13, 3)
    assert problem.seqlens_cpu.dtype == torch.int64 and problem.seqlens_cpu.device.type == "cpu"
    assert problem.seqlens_cpu.tolist() == bounds
    source = args["cu_seqlens_cpu"] if with_cpu_copy else args["cu_seqlens"]
    assert problem.seqlens_cpu.data_ptr() != source.data_ptr()


def test_varlen_with_cpu_copy_never_reads_cu_seqlens():
    """All tensors on 'meta' (contents unreadable): with cu_seqlens_cpu the device boundaries are never read."""
    args = make_args(T=13, device="meta")
    args["cu_seqlens"] = torch.empty(3, dtype=torch.int64, device="meta")
    args["cu_seqlens_cpu"] = torch.tensor([0, 6, 13], dtype=torch.int32)
    assert validate_chunk_kda(**args).seqlens_cpu.tolist() == [0, 6, 13]


def test_valid_state_v_first():
    args = make_args(B=2, HV=4, K=16, V=8)
    args.update(state_v_first=True, initial_state=torch.randn(2, 4, 8, 16), output_final_state=True)
    problem = validate_chunk_kda(**args)
    assert problem.state_v_first is True and problem.N == 2


def test_deprecated_transpose_state_layout():
    args = make_args()
    args.update(initial_state=torch.randn(1, 4, 8, 16), kwargs={"transpose_state_layout": True})
    deprecated = r"`transpose_state_layout` is deprecated and renamed to `state_v_first`"
    with pytest.warns(DeprecationWarning, match=deprecated):
        problem = validate_chunk_kda(**args)
    assert problem.state_v_first is True
    assert args["kwargs"] == {"transpose_state_layout": True}


def test_valid_gate_softplus_form():
    args = make_args(HV=4, K=16)
    A_log, dt_bias = torch.randn(4), torch.randn(4 * 16, dtype=torch.bfloat16)
    gate(args, A_log=A_log, dt_bias=dt_bias, chunk_size=32)
    args["use_beta_sigmoid_in_kernel"] = args["allow_neg_eigval"] = True
    problem = validate_chunk_kda(**args)
    assert problem.A_log is A_log and problem.dt_bias is dt_bias and problem.chunk_size == 32


def test_valid_gate_lower_bound_form():
    args = make_args(HV=4, K=16)
    dt_bias = torch.randn(4, 16)
    gate(args, dt_bias=dt_bias)
    args.update(safe_gate=True, lower_bound=-5)
    problem = validate_chunk_kda(**args)
    assert problem.A_log is None and problem.dt_bias is dt_bias


def test_gate_params_dropped_without_gate_in_kernel():
    args = make_args()
    args["kwargs"] = {"A_log": torch.randn(4), "dt_bias": torch.randn(64)}
    problem = validate_chunk_kda(**args)
    assert problem.A_log is None and problem.dt_bias is None


@pytest.mark.parametrize("scale, expected", [
    pytest.param(0.25, 0.25, id="float"), pytest.param(2, 2.0, id="int"),
    pytest.param(torch.tensor(-0.5, dtype=torch.float64), -0.5, id="tensor-0d"),
])
def test_valid_scale(scale, expected):
    args = make_args()
    args["scale"] = scale
    problem = validate_chunk_kda(**args)
    assert type(problem.scale) is float and problem.scale == expected


def test_valid_mixed_dtypes_and_non_contiguous():
    args = make_args(B=2, T=8, H=2, HV=4, K=16, V=8, dtype=torch.float16)
    args.update(
        q=torch.randn(2, 2, 8, 16, dtype=torch.float16).transpose(1, 2),
        g=-torch.rand(2, 8, 4, 16, dtype=torch.bfloat16),
        beta=torch.rand(2, 4, 8).transpose(1, 2),
    )
    assert not args["q"].is_contiguous() and not args["beta"].is_contiguous()
    assert validate_chunk_kda(**args).HV == 4


def test_valid_intermediate_states_in_inference_mode():
    args = make_args()
    args["return_intermediate_states"] = True
    with torch.inference_mode():
        assert validate_chunk_kda(**args).T == 8


def test_signature_matches_fla():
    import fla.ops.kda

    import triton_kda

    def described(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert described(triton_kda.chunk_kda) == described(fla.ops.kda.chunk_kda)
