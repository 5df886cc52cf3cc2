"""chunk_kda under torch.compile: the custom ops (`triton_kda.ops`) pass opcheck, a fullgraph compile of a block that
calls chunk_kda has no graph break and gives eager's bits forward and backward, dynamic sequence lengths compile
once, validation errors still reach the caller, and a prefill into a state pool gives eager's outputs and pool.

On the CPU the backend is `aot_eager` (dynamo + AOT autograd, the ops run through the Triton interpreter); the GPU
tests compile with inductor.
"""
import re

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from benchmarks.stack_check import KDABlock, block_grads, compile_errors
from tests.utils import DEVICE, assert_close, make_inputs
from triton_kda import chunk_kda, ops

CPU_BACKEND = "aot_eager"
GRAD_NAMES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def _kda_fn(**opts):
    """fn(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_cpu) -> (o * 2, final_state)."""
    def fn(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_cpu):
        o, ht = chunk_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
                          output_final_state=True, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, **opts)
        return o * 2, ht
    return fn


def _args(d):
    return [d.get(name) for name in (*GRAD_NAMES, "cu_seqlens", "cu_seqlens_cpu")]


def _fwd_bwd(fn, d, seed=0, dynamic_T=False):
    """[o, final_state, and the gradient of every input] of fn on fresh leaves of d's tensors (their token dimension
    marked dynamic with dynamic_T, and in varlen the initial states' sequence dimension)."""
    leaves = {n: d[n].detach().requires_grad_(True) for n in GRAD_NAMES if d.get(n) is not None}
    if dynamic_T:
        for name in ("q", "k", "v", "g", "beta"):
            torch._dynamo.mark_dynamic(leaves[name], 1)
        if d.get("cu_seqlens") is not None and "initial_state" in leaves:  # one state per sequence: N varies too
            torch._dynamo.mark_dynamic(leaves["initial_state"], 0)
    o, ht = fn(*_args({**d, **leaves}))
    gen = torch.Generator(device=o.device).manual_seed(seed)
    do, dht = (torch.randn(t.shape, generator=gen, device=t.device).to(t.dtype) for t in (o, ht))
    return [o, ht, *torch.autograd.grad((o, ht), list(leaves.values()), (do, dht))]


CASES = {
    "B2-T70-H1-HV2-K16-V16-gate-l2norm-h0": dict(
        shape=(2, 70, 1, 2, 16, 16), opts=dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True), call={}),
    "varlen-7-0-40-beta_sigmoid-disable_recompute": dict(
        shape=(1, 47, 1, 1, 16, 32), opts=dict(use_beta_sigmoid_in_kernel=True, seqlens=[7, 0, 40]),
        call=dict(use_beta_sigmoid_in_kernel=True, disable_recompute=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fullgraph_aot_eager_matches_eager_bit_for_bit(name):
    case = CASES[name]
    d = make_inputs(*case["shape"], device=DEVICE, initial_state=True, **case["opts"])
    fn = _kda_fn(**{**{k: v for k, v in case["opts"].items() if k != "seqlens"}, **case["call"]})
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, backend=CPU_BACKEND, fullgraph=True)
    got, ref = _fwd_bwd(compiled, d), _fwd_bwd(fn, d)
    assert sum(counters["graph_break"].values()) == 0
    for i, (a, b) in enumerate(zip(got, ref, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"output {i} differs"


def test_block_compiles_without_graph_breaks_and_matches_eager():
    torch.manual_seed(0)
    block = KDABlock(D=32, H=2, K=16).to(DEVICE)
    x = torch.randn(2, 40, 32, device=DEVICE)
    dy = torch.randn_like(x)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    got = block_grads(block, torch.compile(block, backend=CPU_BACKEND, fullgraph=True), x, dy)
    ref = block_grads(block, block, x, dy)
    for i, (a, b) in enumerate(zip(got, ref, strict=True)):
        assert_close(f"block output {i}", a, b, 1e-6)


def test_dynamic_sequence_length_compiles_once():
    cnt = CompileCounterWithBackend(CPU_BACKEND)
    fn = _kda_fn(use_qk_l2norm_in_kernel=True)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=cnt, fullgraph=True)
    for T in (20, 37, 70):
        d = make_inputs(1, T, 1, 1, 16, 16, device=DEVICE, initial_state=True, use_qk_l2norm_in_kernel=True)
        got, ref = _fwd_bwd(compiled, d, dynamic_T=True), _fwd_bwd(fn, d)
        assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    assert cnt.frame_count == 1


def test_validation_errors_reach_the_caller_under_compile():
    d = make_inputs(1, 40, 1, 1, 16, 16, device=DEVICE, seqlens=[9, 31])
    fn = _kda_fn()
    bad_beta = {**d, "beta": d["beta"][..., :0]}
    message = "beta must have shape [B, T, HV]=[1, 40, 1], got [1, 40, 0]"
    torch._dynamo.reset()
    with pytest.raises(ValueError, match=re.escape(message)):
        torch.compile(fn, backend=CPU_BACKEND)(*_args(bad_beta))
    # fullgraph=True cannot compile a raise: dynamo reports it with the same message
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"Observed exception") as error:
        torch.compile(fn, backend=CPU_BACKEND, fullgraph=True)(*_args(bad_beta))
    assert message in str(error.value)
    # the boundaries' values cannot be read while tracing: the op checks them when it runs, before any launch
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=CPU_BACKEND, fullgraph=True)
    compiled(*_args(d))
    for cpu in (torch.tensor([0, 41, 40]), None):
        bad = {**d, "cu_seqlens": torch.tensor([0, 41, 40], device=DEVICE), "cu_seqlens_cpu": cpu}
        name = "cu_seqlens_cpu" if cpu is not None else "cu_seqlens"
        with pytest.raises(ValueError, match=rf"`{name}` must be non-decreasing, got {name}\[2\]=40 < {name}\[1\]=41"):
            compiled(*_args(bad))


def _op_args(d, *, chunk_size=32, grad=True, **flags):
    options = dict(output_final_state=True, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                   use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False, disable_recompute=False,
                   return_intermediate_states=False, state_v_first=False)
    options.update(flags)
    K = d["q"].shape[-1]
    tensors = [d.get(name) for name in ops._TENSOR_ARGS]
    return (*tensors, K ** -0.5, chunk_size, d.get("lower_bound"), *options.values(), grad)


OPCHECK = {
    "B2-T20-H1-HV2-h0-final": (dict(shape=(2, 20, 1, 2, 16, 16), initial_state=True), {}),
    "varlen-disable_recompute-gate": (
        dict(shape=(1, 40, 1, 1, 16, 16), seqlens=[7, 33], initial_state=True, use_gate_in_kernel=True),
        dict(disable_recompute=True, use_gate_in_kernel=True)),
    "B2-T40-intermediate-states-inference": (
        dict(shape=(2, 40, 1, 1, 16, 16), initial_state=True), dict(return_intermediate_states=True, grad=False)),
    "varlen-intermediate-states-v_first-inference": (
        dict(shape=(1, 40, 1, 2, 16, 16), seqlens=[40, 0], initial_state=True, state_v_first=True),
        dict(return_intermediate_states=True, state_v_first=True, grad=False)),
}


@pytest.mark.parametrize("name", list(OPCHECK))
def test_opcheck_forward_op(name):
    inputs, flags = OPCHECK[name]
    inputs = dict(inputs)
    d = make_inputs(*inputs.pop("shape"), device=DEVICE, requires_grad=flags.get("grad", True), **inputs)
    torch.library.opcheck(ops.chunk_kda_fwd, _op_args(d, **flags))


def test_opcheck_backward_op():
    d = make_inputs(1, 30, 1, 2, 16, 16, device=DEVICE, seqlens=[12, 18], initial_state=True, use_gate_in_kernel=True,
                    lower_bound=-4.0)
    args = _op_args(d, use_gate_in_kernel=True)
    o, ht, _, saved = ops.chunk_kda_fwd(*args)
    tensors = {name: d.get(name) for name in ops._TENSOR_ARGS}
    options = dict(scale=16 ** -0.5, chunk_size=32, lower_bound=-4.0, use_qk_l2norm_in_kernel=False,
                   use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                   disable_recompute=False, state_v_first=False)
    torch.library.opcheck(ops.chunk_kda_bwd, (torch.randn_like(o), torch.randn_like(ht), *tensors.values(), saved,
                                              *options.values()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_inductor_fullgraph_block_matches_eager(dtype):
    """Inductor's block is as close to the fp32 eager block as eager's own (fp32: equal to it up to fusion order)."""
    torch.manual_seed(0)
    block = KDABlock(D=256, H=2, K=128).to("cuda")
    x = torch.randn(2, 300, 256, device="cuda")
    dy = torch.randn_like(x)
    torch._dynamo.reset()
    counters.clear()
    e = compile_errors(block, dtype, x, dy)
    assert sum(counters["graph_break"].values()) == 0
    if dtype == torch.float32:
        # inductor reorders the fp32 reductions of the projections and the norm: 1.8e-5 on an H100 (2026-11-24)
        assert e["compiled_vs_eager"] <= 6e-5
    assert e["compiled_err"] <= 1.5 * e["eager_err"] + 1e-4, e


def _compiles_once_across_varlen(backend: str, cases, H: int, HV: int, K: int, dtype: torch.dtype) -> None:
    """fullgraph compile of Kimi-flag chunk_kda with the boundaries, token and sequence dimensions dynamic: every
    (seqlens) case equals eager bit for bit forward and backward, and all share one compiled frame."""
    cnt = CompileCounterWithBackend(backend)
    fn = _kda_fn(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                 safe_gate=True, lower_bound=-5.0)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=cnt, fullgraph=True)
    for seqlens in cases:
        d = make_inputs(1, sum(seqlens), H, HV, K, K, dtype=dtype, device=DEVICE, seqlens=seqlens,
                        initial_state=True, use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                        use_beta_sigmoid_in_kernel=True)
        for name in ("cu_seqlens", "cu_seqlens_cpu"):
            torch._dynamo.mark_dynamic(d[name], 0)
        got, ref = _fwd_bwd(compiled, d, dynamic_T=True), _fwd_bwd(fn, d)
        assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    assert cnt.frame_count == 1


@pytest.mark.gpu
def test_inductor_fullgraph_varlen_dynamic_matches_eager():
    _compiles_once_across_varlen("inductor", ([100, 3, 197], [64, 0, 400, 36]), 2, 4, 128, torch.bfloat16)


def test_pool_prefill_under_compile_matches_eager():
    """The state-pool keywords (pool.py) run eagerly around the op under compile: the same outputs and pool writes
    as eager, the pool returned in place of the final state."""
    d = make_inputs(1, 45, 1, 2, 16, 16, device=DEVICE, seqlens=[30, 15])
    x = [d[n] for n in ("q", "k", "v", "g", "beta")]
    idx = torch.tensor([3, -1], device=DEVICE)
    pool = torch.randn(4, 2, 16, 16, device=DEVICE)

    def fn(q, k, v, g, beta, pool, idx, cu_seqlens):
        o, ht = chunk_kda(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
                          cu_seqlens=cu_seqlens)
        return o * 2, ht

    ref_pool, got_pool = pool.clone(), pool.clone()
    ref = fn(*x, ref_pool, idx, d["cu_seqlens"])
    torch._dynamo.reset()
    got = torch.compile(fn, backend=CPU_BACKEND)(*x, got_pool, idx, d["cu_seqlens"])
    assert got[1] is got_pool
    assert torch.equal(got[0], ref[0])
    assert torch.equal(got_pool, ref_pool)
    assert not torch.equal(got_pool[3], pool[3])
    assert torch.equal(got_pool[:3], pool[:3])


def test_aot_eager_varlen_sequence_count_dynamic_one_compile():
    """Calls with 3 and then 4 sequences share one compiled frame (the validation compares sizes symbolically,
    without specialising N)."""
    _compiles_once_across_varlen(CPU_BACKEND, ([10, 3, 19], [6, 0, 40, 3]), 1, 2, 16, torch.float32)
