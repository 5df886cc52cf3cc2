"""triton_kda.fused_recurrent_kda (decode.py, its kernels in recurrent.py) and the state-pool keywords of chunk_kda
(pool.py) against the fp64 oracle: every flag, GVA, varlen, both state layouts; autograd; state pools (untouched
slots bit-identical, padding, per-token indices with accepted-token counts, prefill into a pool then decode);
validation; on a GPU bf16/fp16 against fla's fused_recurrent_kda and CUDA-graph capture."""
import pytest
import torch
from triton.compiler import CompiledKernel

from reference.kda import kda_recurrent
from tests.utils import DEVICE, assert_close, case_id, make_inputs
from triton_kda import chunk_kda, decode, fused_recurrent_kda, recurrent

# tolerances against the fp64 oracle (measured on CPU: fp32 o and states <= 2.3e-7, gradients <= 6.5e-7,
# fp16 o <= 2.2e-4)
FP32_FWD, FP32_BWD, FP16_FWD = 1e-6, 3e-6, 1e-3
GRAD_INPUTS = ("q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias")
_TOKEN_INPUTS = ("q", "k", "v", "g", "beta")

# (B, T, H, HV, K, V, seqlens, options for make_inputs; a_log=None drops A_log)
CASES = [
    (3, 1, 1, 2, 16, 16, None, dict(initial_state=True)),
    (2, 9, 2, 2, 32, 16, None, dict(use_qk_l2norm_in_kernel=True, initial_state=True)),
    (1, 12, 1, 2, 16, 32, [5, 0, 7], dict(use_gate_in_kernel=True, initial_state=True)),
    (1, 10, 1, 1, 16, 16, None, dict(use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                                     allow_neg_eigval=True)),
    (2, 6, 1, 2, 16, 16, None, dict(gate="strong", initial_state=True, state_v_first=True)),
    (1, 8, 1, 1, 100, 60, None, {}),
    (1, 6, 1, 4, 16, 16, [1, 2, 3], dict(use_gate_in_kernel=True, lower_bound=-3.0, a_log=None,
                                         use_qk_l2norm_in_kernel=True, initial_state=True, state_v_first=True)),
]


def _ids(c):
    B, T, H, HV, K, V, seqlens, opts = c
    flags = "-".join(f"{k}={v}" for k, v in opts.items())
    return case_id(B=B, T=T, H=H, HV=HV, K=K, V=V, seqlens=seqlens) + (f"-{flags}" if flags else "")


def _inputs(case, dtype=torch.float32, **extra):
    B, T, H, HV, K, V, seqlens, opts = case
    opts = dict(opts)
    keep_a_log = opts.pop("a_log", True) is not None
    d = make_inputs(B, T, H, HV, K, V, dtype=dtype, device=DEVICE, seqlens=seqlens, output_final_state=True,
                    **opts, **extra)
    if not keep_a_log:
        d.pop("A_log")
    return d


@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty / empty_like return NaN-filled float tensors, so any element a kernel leaves unwritten fails."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poison(empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poison(empty_like(*a, **kw)))


def _check_forward(d, tol):
    o, ht = fused_recurrent_kda(**d)
    ref_o, ref_ht = kda_recurrent(**d)
    assert o.dtype == d["q"].dtype and o.shape == d["v"].shape and ht.dtype == torch.float32
    assert_close("o", o, ref_o, tol)
    assert_close("final_state", ht, ref_ht, tol)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_fp32(case, poisoned):
    _check_forward(_inputs(case), FP32_FWD)


@pytest.mark.parametrize("case", CASES[1:4], ids=_ids)
def test_forward_fp16(case, poisoned):
    _check_forward(_inputs(case, torch.float16), FP16_FWD)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_bf16(case):
    _check_forward(_inputs(case, torch.bfloat16), 5e-3)


def _grads(fn, d, upstream):
    """Gradients of sum(o * do) + sum(ht * dht) w.r.t. every float input of `d`, by name."""
    names = [n for n in GRAD_INPUTS if isinstance(d.get(n), torch.Tensor)]
    leaves = {n: d[n].detach().clone().requires_grad_(True) for n in names}
    o, ht = fn(**{**d, **leaves})
    outs = [o] + ([ht] if ht is not None else [])
    ups = [u.to(x.dtype) for u, x in zip(upstream, outs, strict=True)]
    grads = torch.autograd.grad(outs, list(leaves.values()), ups, allow_unused=True)
    return dict(zip(names, grads, strict=True))


def _upstream(d, with_ht):
    o, ht = kda_recurrent(**d)
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    return [torch.randn(t.shape, generator=gen, device=DEVICE, dtype=torch.float64) for t in ([o, ht] if with_ht
                                                                                              else [o])]


@pytest.mark.parametrize("case,with_ht", [(CASES[0], True), (CASES[2], True), (CASES[3], False), (CASES[4], True),
                                          (CASES[6], True)], ids=lambda x: _ids(x) if isinstance(x, tuple) else
                         ("dht" if x else "no-dht"))
def test_backward_fp32(case, with_ht, poisoned):
    d = _inputs(case)
    d["output_final_state"] = with_ht
    upstream = _upstream(d, with_ht)
    ours = _grads(fused_recurrent_kda, d, upstream)
    ref = _grads(kda_recurrent, {n: (t.double() if n in GRAD_INPUTS else t) for n, t in d.items()}, upstream)
    for name, gr in ours.items():
        assert gr is not None and gr.dtype == d[name].dtype, name
        assert_close(f"d{name}", gr, ref[name], FP32_BWD)


def test_backward_is_deterministic():
    d = _inputs(CASES[2])
    upstream = _upstream(d, True)
    first, second = _grads(fused_recurrent_kda, d, upstream), _grads(fused_recurrent_kda, d, upstream)
    assert all(torch.equal(first[n], second[n]) for n in first)


def test_backward_fp16():
    d = _inputs(CASES[1], torch.float16)
    upstream = _upstream(d, True)
    ours = _grads(fused_recurrent_kda, d, upstream)
    ref = _grads(kda_recurrent, {n: (t.double() if n in GRAD_INPUTS else t) for n, t in d.items()}, upstream)
    for name, gr in ours.items():
        assert gr.dtype == d[name].dtype
        assert_close(f"d{name}", gr, ref[name], 5e-3)


def test_outputs_are_causal():
    """o at t depends on tokens <= t only: changing the last token leaves earlier outputs bit-identical."""
    d = _inputs(CASES[1])
    o1, _ = fused_recurrent_kda(**d)
    for name in ("q", "k", "v", "g"):
        d[name] = d[name].clone()
        d[name][:, -1] += 1.0
    o2, _ = fused_recurrent_kda(**d)
    assert torch.equal(o1[:, :-1], o2[:, :-1]) and not torch.equal(o1[:, -1], o2[:, -1])


def test_defaults_out_buffer_and_positional_gate_params():
    d = make_inputs(2, 3, 1, 2, 16, 16, device=DEVICE, use_gate_in_kernel=True)
    o, ht = fused_recurrent_kda(d["q"], d["k"], d["v"], d["g"], d["beta"], d["A_log"], d["dt_bias"],
                                use_gate_in_kernel=True)
    assert ht is None
    assert_close("o", o, kda_recurrent(**d)[0], FP32_FWD)
    out = torch.full_like(o, float("nan"))
    o2, _ = fused_recurrent_kda(d["q"], d["k"], d["v"], d["g"], d["beta"], d["A_log"], d["dt_bias"],
                                use_gate_in_kernel=True, out=out)
    assert o2 is out and torch.equal(out, o)


def test_signature_matches_fla():
    import inspect

    import fla.ops.kda

    def described(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert described(fused_recurrent_kda) == described(fla.ops.kda.fused_recurrent_kda)


def test_transpose_state_layout_is_state_v_first():
    d = _inputs(CASES[4])
    d.pop("state_v_first")
    with pytest.warns(DeprecationWarning, match="state_v_first"):
        o, ht = fused_recurrent_kda(**d, transpose_state_layout=True)
    ref_o, ref_ht = kda_recurrent(**d, state_v_first=True)
    assert_close("final_state", ht, ref_ht, FP32_FWD)


# ---------------------------------------------------------------- state pools

def _pool_case(N, HV=2, K=16, V=16, slots=9, state_v_first=False, seed=0):
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 100)
    shape = (HV, V, K) if state_v_first else (HV, K, V)
    return torch.randn(slots, *shape, generator=gen, device=DEVICE)


def _gathered(pool, idx):
    """Initial states [N, ...] the pool gives for indices idx (zeros for padded entries)."""
    idx = idx.long().to(pool.device)
    return torch.where((idx >= 0)[:, None, None, None], pool[idx.clamp(min=0)], 0.0)


@pytest.mark.parametrize("state_v_first", [False, True], ids=["kfirst", "vfirst"])
def test_decode_into_pool_in_place(state_v_first, poisoned):
    """One decode step: named slots get the oracle's final states, a padded entry (-1) starts from zeros and writes
    nothing, every other slot stays bit-identical; the pool itself is returned."""
    d = make_inputs(4, 1, 1, 2, 16, 16, device=DEVICE, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                    lower_bound=-5.0, use_beta_sigmoid_in_kernel=True, state_v_first=state_v_first)
    pool = _pool_case(4, state_v_first=state_v_first)
    idx = torch.tensor([5, -1, 2, 8], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    ref_o, ref_ht = kda_recurrent(**{**d, "output_final_state": True}, initial_state=_gathered(before, idx))
    o, ret = fused_recurrent_kda(**d, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True)
    assert ret is pool
    assert_close("o", o, ref_o, FP32_FWD)
    assert_close("slots", pool[[5, 2, 8]], ref_ht[[0, 2, 3]], FP32_FWD)
    untouched = [s for s in range(pool.shape[0]) if s not in (5, 2, 8)]
    assert torch.equal(pool[untouched], before[untouched])


def test_pool_read_only_and_pool_gradient():
    """ssm_state_indices without inplace_final_state: the pool is only read, the final states are returned, and
    the pool's gradient is the oracle's dh0 at the slots read and zero elsewhere."""
    d = make_inputs(1, 7, 1, 2, 16, 16, device=DEVICE, seqlens=[3, 0, 4], use_gate_in_kernel=True,
                    output_final_state=True, requires_grad=True)
    pool = _pool_case(3).requires_grad_(True)
    idx = torch.tensor([6, 1, -1], dtype=torch.int64, device=DEVICE)
    before = pool.detach().clone()
    o, ht = fused_recurrent_kda(**d, initial_state=pool, ssm_state_indices=idx)
    assert torch.equal(pool.detach(), before)
    h0 = _gathered(before, idx).double().requires_grad_(True)
    ref = {n: (t.detach().double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
           for n, t in d.items()}
    ref_o, ref_ht = kda_recurrent(**ref, initial_state=h0)
    assert_close("o", o, ref_o, FP32_FWD)
    assert_close("final_state", ht, ref_ht, FP32_FWD)
    do, dht = torch.randn_like(o), torch.randn_like(ht)
    (dpool,) = torch.autograd.grad([o, ht], [pool], [do, dht])
    (dh0,) = torch.autograd.grad([ref_o, ref_ht], [h0], [do.double(), dht.double()])
    assert_close("dpool slots", dpool[[6, 1]], dh0[:2], FP32_BWD)
    assert not dpool[[0, 2, 3, 4, 5, 7, 8]].any()


def test_in_place_without_indices_updates_initial_state():
    d = _inputs(CASES[1])
    h = d.pop("initial_state")
    ref_o, ref_ht = kda_recurrent(**d, initial_state=h)
    o, ret = fused_recurrent_kda(**{**d, "output_final_state": False}, initial_state=h, inplace_final_state=True)
    assert ret is h
    assert_close("o", o, ref_o, FP32_FWD)
    assert_close("initial_state (updated)", h, ref_ht, FP32_FWD)


def _step_by_step(d, h0, lengths):
    """Reference: each sequence of `d` (tokens laid end to end in one row) decoded one token per call (T = 1) from
    h0[n], with d's flags; returns (o [TT, HV, V], the state after every token, one [L_n, ...] tensor per
    sequence)."""
    flags = {n: t for n, t in d.items() if n not in (*_TOKEN_INPUTS, "cu_seqlens", "cu_seqlens_cpu", "initial_state",
                                                     "output_final_state")}
    outs, states, start = [], [], 0
    for n, L in enumerate(lengths):
        S, seq_states = h0[n:n + 1], []
        for t in range(start, start + L):
            tok = {x: d[x][:, t:t + 1] for x in _TOKEN_INPUTS}
            o, S = fused_recurrent_kda(**tok, **flags, initial_state=S, output_final_state=True)
            outs.append(o[0, 0])
            seq_states.append(S[0])
        states.append(torch.stack(seq_states) if seq_states else None)
        start += L
    return torch.stack(outs), states


def test_speculative_steps_with_accepted_tokens_equal_step_by_step():
    """Two multi-token steps through per-token indices [N, S]: token t of sequence n writes its state to slot
    idx[n, t]; the next step starts from idx[n, num_accepted[n] - 1]. Outputs and written slots equal decoding the
    same tokens one per call (and the oracle); a padded sequence (-1) starts from zeros and writes nothing."""
    HV, K, V = 2, 16, 16
    pool = _pool_case(4, slots=14)
    idx = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [-1, -1, -1]], dtype=torch.int32, device=DEVICE)
    state = {"pool": pool.clone()}
    for step, (lengths, accepted) in enumerate((([3, 2, 1, 2], [1, 2, 3, 1]), ([2, 3, 1, 1], [2, 1, 1, 1]))):
        d = make_inputs(1, sum(lengths), 1, HV, K, V, device=DEVICE, seqlens=lengths, seed=step,
                        use_qk_l2norm_in_kernel=True)
        acc = torch.tensor(accepted, dtype=torch.int64, device=DEVICE)
        read = idx.long()[torch.arange(4, device=DEVICE), acc - 1]
        before = pool.clone()
        h0 = _gathered(before, read)
        o, _ = fused_recurrent_kda(**d, initial_state=pool, ssm_state_indices=idx, num_accepted_tokens=acc,
                                   inplace_final_state=True)
        ref_o, per_token = _step_by_step(d, h0, lengths)
        assert_close(f"step {step} o", o[0], ref_o, 1e-6)
        assert_close(f"step {step} o vs oracle", o, kda_recurrent(**d, initial_state=h0)[0], FP32_FWD)
        written = set()
        for n, L in enumerate(lengths[:3]):
            slots = idx[n, :L].long()
            assert_close(f"step {step} seq {n} slots", pool[slots], per_token[n], 1e-6)
            written |= set(slots.tolist())
        untouched = [s for s in range(pool.shape[0]) if s not in written]
        assert torch.equal(pool[untouched], before[untouched])
    assert not torch.equal(pool, state["pool"])


def test_strided_cu_seqlens_and_accepted_counts_equal_contiguous_ones():
    """1-D cu_seqlens and num_accepted_tokens given as strided views give what their contiguous copies give."""
    pool = _pool_case(2, slots=6)
    idx = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=DEVICE)
    d = make_inputs(1, 3, 1, 2, 16, 16, device=DEVICE, seqlens=[2, 1], seed=3, use_qk_l2norm_in_kernel=True)
    acc = torch.tensor([2, 1], dtype=torch.int64, device=DEVICE)
    outs = []
    for strided in (False, True):
        args = dict(d)
        a = acc
        if strided:
            args["cu_seqlens"] = torch.stack([d["cu_seqlens"], d["cu_seqlens"] + 100], 1)[:, 0]
            a = torch.stack([acc, acc + 7], 1)[:, 0]
            assert not args["cu_seqlens"].is_contiguous() and not a.is_contiguous()
        p = pool.clone()
        o, _ = fused_recurrent_kda(**args, initial_state=p, ssm_state_indices=idx, num_accepted_tokens=a,
                                   inplace_final_state=True)
        outs.append((o, p))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_per_token_indices_without_accepted_read_column_zero_and_skip_negative_writes():
    d = make_inputs(2, 2, 1, 2, 16, 16, device=DEVICE)
    pool = _pool_case(2, slots=6)
    idx = torch.tensor([[4, -1], [1, 0]], dtype=torch.int64, device=DEVICE)
    before = pool.clone()
    h0 = _gathered(before, idx[:, 0])
    o, _ = fused_recurrent_kda(**d, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True)
    ref_o, states = _step_by_step({n: t.reshape(1, 4, *t.shape[2:]) for n, t in d.items() if n in _TOKEN_INPUTS},
                                  h0, [2, 2])
    assert_close("o", o.reshape(4, 2, 16), ref_o, 1e-6)
    assert_close("slot 4 (seq 0, token 0)", pool[4], states[0][0], 1e-6)
    assert_close("slots 1, 0 (seq 1)", pool[[1, 0]], states[1], 1e-6)
    assert torch.equal(pool[[2, 3, 5]], before[[2, 3, 5]])


def test_unchecked_out_of_range_index_is_padding():
    """check_indices=False (or CUDA-graph capture): an index past the pool reads and writes nothing."""
    d = make_inputs(2, 1, 1, 2, 16, 16, device=DEVICE)
    pool = _pool_case(2, slots=3)
    idx = torch.tensor([7, 0], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    o, _ = fused_recurrent_kda(**d, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
                               check_indices=False)
    ref_o, ref_ht = kda_recurrent(**{**d, "output_final_state": True},
                                  initial_state=_gathered(before, torch.tensor([-1, 0])))
    assert_close("o", o, ref_o, FP32_FWD)
    assert_close("slot 0", pool[0], ref_ht[1], FP32_FWD)
    assert torch.equal(pool[1:], before[1:])


def test_prefill_into_pool_then_decode_equals_one_chunk_kda():
    """chunk_kda writes the prompt's final states into pool slots, fused_recurrent_kda decodes three more tokens
    from them in place: outputs and final slots equal one chunk_kda call over the whole sequences."""
    prompt, decode = [37, 20], 3
    N = len(prompt)
    full = [p + decode for p in prompt]
    d = make_inputs(1, sum(full), 1, 2, 16, 16, device=DEVICE, seqlens=full, initial_state=True,
                    use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, output_final_state=True)
    h0 = d.pop("initial_state")
    ref_o, ref_ht = chunk_kda(**d, initial_state=h0)
    pool = _pool_case(N, slots=5)
    idx = torch.tensor([3, 1], dtype=torch.int32, device=DEVICE)
    pool[idx.long()] = h0
    before = pool.clone()
    starts = [0, full[0]]
    x = {n: d[n] for n in _TOKEN_INPUTS}
    params = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, A_log=d["A_log"],
                  dt_bias=d["dt_bias"])
    pre = {n: torch.cat([t[:, s:s + p] for s, p in zip(starts, prompt, strict=True)], 1) for n, t in x.items()}
    cu = torch.tensor([0, prompt[0], sum(prompt)], device=DEVICE)
    o_pre, ret = chunk_kda(**pre, **params, initial_state=pool, ssm_state_indices=idx, inplace_final_state=True,
                           cu_seqlens=cu)
    assert ret is pool
    outs = []
    for t in range(decode):
        tok = {n: torch.stack([v[0, s + p + t] for s, p in zip(starts, prompt, strict=True)])[:, None]
               for n, v in x.items()}
        o_t, _ = fused_recurrent_kda(**tok, **params, initial_state=pool, ssm_state_indices=idx,
                                     inplace_final_state=True)
        outs.append(o_t[:, 0])
    for n in range(N):
        s = starts[n]
        assert_close(f"seq {n} prefill o", o_pre[0, sum(prompt[:n]):sum(prompt[:n + 1])], ref_o[0, s:s + prompt[n]],
                     FP32_FWD)
        assert_close(f"seq {n} decode o", torch.stack([o[n] for o in outs]), ref_o[0, s + prompt[n]:s + full[n]],
                     FP32_FWD)
    assert_close("final slots", pool[idx.long()], ref_ht, FP32_FWD)
    assert torch.equal(pool[[0, 2, 4]], before[[0, 2, 4]])


def test_chunk_kda_pool_read_only_with_padding():
    d = make_inputs(3, 20, 1, 2, 16, 16, device=DEVICE, output_final_state=True)
    pool = _pool_case(3, slots=4)
    idx = torch.tensor([2, -1, 0], dtype=torch.int64, device=DEVICE)
    before = pool.clone()
    o, ht = chunk_kda(**d, initial_state=pool, ssm_state_indices=idx)
    ref_o, ref_ht = kda_recurrent(**d, initial_state=_gathered(before, idx))
    assert torch.equal(pool, before)
    assert_close("o", o, ref_o, 1e-5)
    assert_close("final_state", ht, ref_ht, 1e-5)


# ---------------------------------------------------------------- validation

def _decode_call(**change):
    """Keyword arguments of a valid pool decode call (N = 2, pool of 4 slots), with `change` applied."""
    d = make_inputs(2, 1, 1, 2, 16, 16, device=DEVICE)
    d.update(initial_state=_pool_case(2, slots=4), ssm_state_indices=torch.tensor([1, 3], device=DEVICE),
             inplace_final_state=True)
    d.update(change)
    return d


def _idx(*rows, dtype=torch.int64):
    return torch.tensor(rows, dtype=dtype, device=DEVICE)


BAD_CALLS = [
    ("index-out-of-range", dict(ssm_state_indices=_idx(1, 4)), ValueError, r"ssm_state_indices`\[1\] = 4 is out of"),
    ("duplicate-slot", dict(ssm_state_indices=_idx(2, 2)), ValueError, r"slot 2 to sequences \[0, 1\]"),
    ("duplicate-across-token-slots", dict(ssm_state_indices=_idx([0, 1], [1, 2]), num_accepted_tokens=_idx(2, 1)),
     ValueError, r"slot 1 to sequences \[0, 1\]"),
    ("float-indices", dict(ssm_state_indices=torch.tensor([1.0, 2.0], device=DEVICE)), TypeError, "int32 or int64"),
    ("indices-wrong-N", dict(ssm_state_indices=_idx(1, 2, 3)), ValueError, r"one row per sequence \(N=2\)"),
    ("indices-3d", dict(ssm_state_indices=torch.zeros(2, 1, 1, dtype=torch.int64, device=DEVICE)), ValueError,
     r"\[N\] or \[N, S\]"),
    ("accepted-without-per-token", dict(num_accepted_tokens=_idx(1, 1)), ValueError, r"\[N, S\]"),
    ("accepted-out-of-range", dict(ssm_state_indices=_idx([0, 1], [2, 3]), num_accepted_tokens=_idx(1, 3)),
     ValueError, r"num_accepted_tokens\[1\]=3"),
    ("accepted-wrong-shape", dict(ssm_state_indices=_idx([0, 1], [2, 3]), num_accepted_tokens=_idx(1)), ValueError,
     r"shape \[N\]=\[2\]"),
    ("pool-bf16", dict(initial_state=torch.zeros(4, 2, 16, 16, dtype=torch.bfloat16, device=DEVICE)), TypeError,
     "must be float32"),
    ("pool-wrong-heads", dict(initial_state=torch.zeros(4, 3, 16, 16, device=DEVICE)), ValueError,
     r"num_slots, HV, K, V\] with HV=2"),
    ("pool-inner-not-contiguous", dict(initial_state=torch.zeros(4, 2, 16, 16, device=DEVICE).transpose(2, 3)),
     ValueError, "contiguous in its last three dims"),
    ("indices-without-pool", dict(initial_state=None, inplace_final_state=False), ValueError,
     "names slots of the state pool"),
    ("inplace-without-state", dict(initial_state=None, ssm_state_indices=None), ValueError,
     "writes the final states into `initial_state`"),
    ("inplace-not-bool", dict(inplace_final_state=1), TypeError, "`inplace_final_state` must be a bool"),
    ("out-wrong-dtype", dict(out=torch.empty(2, 1, 2, 16, dtype=torch.float16, device=DEVICE)), ValueError,
     "`out` must be a contiguous tensor"),
    ("unknown-kwarg", dict(chunk_size=64), TypeError, r"fused_recurrent_kda\(\) got unexpected keyword"),
    ("gate-without-a-log", dict(use_gate_in_kernel=True), ValueError, "`A_log` must be provided"),
    ("neg-eigval-without-sigmoid", dict(allow_neg_eigval=True), ValueError, "requires `use_beta_sigmoid"),
]


@pytest.mark.parametrize("change,exc,match", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise_before_any_write(change, exc, match):
    d = _decode_call(**change)
    state = d["initial_state"].clone() if isinstance(d["initial_state"], torch.Tensor) else None
    with pytest.raises(exc, match=match):
        fused_recurrent_kda(**d)
    if state is not None:
        assert torch.equal(d["initial_state"], state)


def test_per_token_indices_too_short_for_the_step():
    d = make_inputs(2, 3, 1, 2, 16, 16, device=DEVICE)
    with pytest.raises(ValueError, match="S=2 columns but each sequence has T=3 tokens"):
        fused_recurrent_kda(**d, initial_state=_pool_case(2, slots=6), ssm_state_indices=_idx([0, 1], [2, 3]),
                            inplace_final_state=True)
    d = make_inputs(1, 4, 1, 2, 16, 16, device=DEVICE, seqlens=[1, 3])
    with pytest.raises(ValueError, match="sequence 1 has 3 tokens but `ssm_state_indices` has S=2"):
        fused_recurrent_kda(**d, initial_state=_pool_case(2, slots=6), ssm_state_indices=_idx([0, 1], [2, 3]),
                            inplace_final_state=True)


def test_in_place_with_grad_and_bad_cu_seqlens():
    d = _decode_call()
    d["q"] = d["q"].requires_grad_(True)
    with pytest.raises(ValueError, match="overwrites the initial states a backward pass needs"):
        fused_recurrent_kda(**d)
    d = make_inputs(1, 4, 1, 2, 16, 16, device=DEVICE, seqlens=[1, 3])
    d["cu_seqlens"] = torch.tensor([0, 3, 2], device=DEVICE)
    d.pop("cu_seqlens_cpu")
    with pytest.raises(ValueError, match="non-decreasing"):
        fused_recurrent_kda(**d)


CHUNK_BAD = [
    ("per-token-indices", dict(ssm_state_indices=_idx([0, 1], [2, 3])), ValueError, r"must have shape \[N\]"),
    ("duplicate-slot", dict(ssm_state_indices=_idx(3, 3)), ValueError, r"slot 3 to sequences \[0, 1\]"),
    ("no-pool", dict(initial_state=None), ValueError, "need the state pool"),
    ("pool-requires-grad", dict(initial_state=torch.zeros(4, 2, 16, 16, device=DEVICE, requires_grad=True)),
     ValueError, "takes no gradient"),
    ("identity-pool-wrong-slots", dict(ssm_state_indices=None), ValueError, "expected 2 slots, got 4"),
    ("accepted-tokens", dict(num_accepted_tokens=_idx(1, 1)), TypeError, "unexpected keyword"),
    ("with-cp-context", dict(cp_context=object()), ValueError, "cannot be combined with `cp_context`"),
]


@pytest.mark.parametrize("change,exc,match", [c[1:] for c in CHUNK_BAD], ids=[c[0] for c in CHUNK_BAD])
def test_chunk_kda_bad_pool_calls(change, exc, match):
    d = _decode_call(**change)
    with pytest.raises(exc, match=match):
        chunk_kda(**d)


# ---------------------------------------------------------------- plans kept per call signature

def _pool_step(B=2, dtype=torch.float32, seed=0, **change):
    """Keyword arguments of a valid decode step (T = 1, H = 1, HV = 2, K = V = 16, Kimi flags) into slots 0, 2, ..
    of a pool of 6 slots (int32 indices), with `change` applied."""
    d = make_inputs(B, 1, 1, 2, 16, 16, dtype=dtype, device=DEVICE, seed=seed, use_qk_l2norm_in_kernel=True,
                    use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True)
    d.update(initial_state=_pool_case(B, slots=6, seed=seed),
             ssm_state_indices=torch.arange(B, dtype=torch.int32, device=DEVICE) * 2, inplace_final_state=True)
    d.update(change)
    return d


@pytest.fixture
def validations(monkeypatch):
    """Starts fused_recurrent_kda with no plans and records each full validation (each plan miss)."""
    decode.clear_plans()
    calls = []
    validate = decode.validate_fused_recurrent_kda
    monkeypatch.setattr(decode, "validate_fused_recurrent_kda", lambda *a: calls.append(1) or validate(*a))
    yield calls
    decode.clear_plans()


def _run(d, monkeypatch, fast):
    """(o, final_state, initial_state after the call) of fused_recurrent_kda on a copy of d's initial_state, with
    plans (`fast`) or without."""
    h = d["initial_state"]
    d = {**d, "initial_state": torch.empty_strided(h.shape, h.stride(), device=h.device).copy_(h)}
    with monkeypatch.context() as m:
        m.setattr(decode, "FAST_PATH", fast)
        o, ht = fused_recurrent_kda(**d)
    return o, ht, d["initial_state"]


def _slot_stride_pool():
    wide = torch.zeros(6, 3, 2, 16, 16, device=DEVICE)
    wide[:, 1] = _pool_case(2, slots=6)
    return wide[:, 1]  # slot stride 3 * HV * K * V


def _varlen_step():
    d = make_inputs(1, 3, 1, 2, 16, 16, device=DEVICE, seqlens=[1, 2], use_qk_l2norm_in_kernel=True)
    d.update(initial_state=_pool_case(2, slots=6), ssm_state_indices=_idx(4, 1), inplace_final_state=True)
    return d


# (id, make the call's arguments): each a signature of its own
SIGNATURES = [
    ("B3", lambda: _pool_step(B=3)),
    ("fp16", lambda: _pool_step(dtype=torch.float16)),
    ("flag", lambda: _pool_step(use_qk_l2norm_in_kernel=False)),
    ("scale", lambda: _pool_step(scale=0.5)),
    ("lower-bound", lambda: _pool_step(lower_bound=-3.0)),
    ("int64-indices", lambda: _pool_step(ssm_state_indices=_idx(0, 2))),
    ("slot-stride", lambda: _pool_step(initial_state=_slot_stride_pool())),
    ("out", lambda: _pool_step(out=torch.empty(2, 1, 2, 16, device=DEVICE))),
    ("check-indices-keyword", lambda: _pool_step(check_indices=True)),
    ("per-sequence-states", lambda: _pool_step(initial_state=_pool_case(2, slots=2), ssm_state_indices=None,
                                               inplace_final_state=False, output_final_state=True)),
    ("varlen", _varlen_step),
]


def test_plans_are_kept_per_signature_and_change_no_bit(validations, monkeypatch):
    """A call validates in full once per signature (shapes, strides, dtypes, flags, scalars, keyword names); repeats,
    also with other tensor values, reuse its plan. Every call gives the bits of the path without plans."""
    calls = [("base", _pool_step, True), ("base-new-values", lambda: _pool_step(seed=1), False),
             *[(name, make, True) for name, make in SIGNATURES], ("B3-new-values", lambda: _pool_step(B=3, seed=2),
                                                                  False)]
    for name, make, new in calls:
        d = make()
        plain = _run(d, monkeypatch, fast=False)
        before = len(validations)
        first = _run(d, monkeypatch, fast=True)
        assert len(validations) == before + new, name
        second = _run(d, monkeypatch, fast=True)
        assert len(validations) == before + new, name
        for got in (first, second):
            assert all(a is b or torch.equal(a, b) for a, b in zip(got, plain, strict=True)), name
    assert len(decode._PLANS) == 1 + len(SIGNATURES)


def test_a_kept_plan_still_checks_contents_and_argument_types(validations):
    """Calls of a kept signature still check the indices' and boundaries' contents (before any write); arguments of
    the wrong type and inputs that require grad take the full validation."""
    d = _pool_step()
    fused_recurrent_kda(**d)
    v = _varlen_step()
    fused_recurrent_kda(**v)
    cases = [
        (d, dict(ssm_state_indices=torch.tensor([0, 6], dtype=torch.int32, device=DEVICE)), ValueError,
         r"ssm_state_indices`\[1\] = 6 is out of range", False),
        (d, dict(ssm_state_indices=torch.tensor([2, 2], dtype=torch.int32, device=DEVICE)), ValueError,
         r"slot 2 to sequences \[0, 1\]", False),
        (v, dict(cu_seqlens=torch.tensor([0, 2, 1], device=DEVICE), cu_seqlens_cpu=torch.tensor([0, 2, 1])),
         ValueError, "non-decreasing", False),
        (d, dict(use_qk_l2norm_in_kernel=1), TypeError, "`use_qk_l2norm_in_kernel` must be a bool", True),
        (d, dict(scale=True), TypeError, "`scale` must be a real number", True),
        (d, dict(lower_bound=torch.tensor(-5.0)), TypeError, "`lower_bound` must be a real number", True),
        (d, dict(scale=torch.tensor(float("inf"))), ValueError, "`scale` must be finite", True),
        (d, dict(q=d["q"].clone().requires_grad_(True)), ValueError, "overwrites the initial states", True),
    ]
    for base, change, exc, match, validated in cases:
        call = {**base, **change}
        state = call["initial_state"].clone()
        before = len(validations)
        with pytest.raises(exc, match=match):
            fused_recurrent_kda(**call)
        assert len(validations) == before + validated, match
        assert torch.equal(call["initial_state"], state)
    assert len(decode._PLANS) == 2


def test_plans_are_bounded(validations, monkeypatch):
    monkeypatch.setattr(decode, "_MAX_PLANS", 2)
    for B in (1, 2, 3):
        fused_recurrent_kda(**_pool_step(B=B))
    assert len(decode._PLANS) == 1


class _Compiled(CompiledKernel):
    """Stands in for the kernel Triton compiles on a GPU: its launcher records what it is given (a grid of three
    dims: Triton's runner reads grid[0], grid[1] and grid[2])."""

    def __getitem__(self, grid):
        assert len(grid) == 3, f"a CompiledKernel runner needs a 3-dim grid, got {grid}"
        return lambda *args, stream: self.launches.append((grid, args, stream))


class _Jit:
    """Stands in for the JIT kernel on a GPU: launches through the interpreter, records the launch's arguments in
    the kernel's parameter order, and returns the one `_Compiled` kernel."""

    def __init__(self, kernel):
        self.kernel, self.arg_names, self.launches = kernel, kernel.arg_names, []
        self.compiled = object.__new__(_Compiled)
        self.compiled.launches = []

    def __getitem__(self, grid):
        def launch(*args, num_warps, num_stages, **constexprs):
            self.kernel[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
            self.launches.append((grid, [*args, *(constexprs[n] for n in self.arg_names[len(args):])]))
            return self.compiled
        return launch


def test_compiled_kernel_is_launched_directly_with_the_bound_arguments(validations, monkeypatch):
    """Where the first launch returns a compiled kernel (a GPU), later calls of the signature launch it directly:
    with the addresses of their tensors and the first launch's other arguments, in the kernel's parameter order, on
    the current stream; through Triton again where a pointer is not 16-byte aligned or the current device has
    none yet."""
    jit = _Jit(recurrent._kda_recurrent_fwd_kernel)
    monkeypatch.setattr(recurrent, "_kda_recurrent_fwd_kernel", jit)
    where = {"device": 0}
    monkeypatch.setattr(recurrent, "_device_stream", lambda: (where["device"], 7 + where["device"]))
    d = _pool_step()
    pool = d["initial_state"].clone()
    with monkeypatch.context() as m:
        m.setattr(decode, "FAST_PATH", False)
        o_plain, _ = fused_recurrent_kda(**{**d, "initial_state": pool.clone()})
    jit.launches.clear()
    o1, _ = fused_recurrent_kda(**d)
    assert len(jit.launches) == 1 and not jit.compiled.launches
    o2, _ = fused_recurrent_kda(**d)
    grid, bound = jit.launches[0]
    expected = [o2.data_ptr() if a is o1 else a.data_ptr() if isinstance(a, torch.Tensor) else a for a in bound]
    assert jit.compiled.launches == [(grid, tuple(expected), 7)] and len(jit.launches) == 1
    assert all(isinstance(a, torch.Tensor) for a in bound[:13]) and not any(isinstance(a, torch.Tensor)
                                                                            for a in bound[13:])
    buf = torch.empty(d["q"].numel() + 1, device=DEVICE)
    shifted = buf[1:].view(d["q"].shape).copy_(d["q"])  # 4 bytes past an aligned address
    o3, _ = fused_recurrent_kda(**{**d, "q": shifted, "initial_state": pool.clone()})
    assert len(jit.launches) == 2 and len(jit.compiled.launches) == 1
    where["device"] = 1
    fused_recurrent_kda(**d)
    fused_recurrent_kda(**d)
    assert len(jit.launches) == 3 and jit.compiled.launches[-1][2] == 8 and len(jit.compiled.launches) == 2
    assert len(validations) == 2  # the call without plans and the first call
    assert torch.equal(o1, o_plain) and torch.equal(o3, o_plain)


# ---------------------------------------------------------------- GPU: against fla, CUDA graphs

def _fla_errors(d, dtype):
    """(ours, fla's) rel RMSE of o and final_state against the fp64 oracle on the same inputs."""
    from fla.ops.kda import fused_recurrent_kda as fla_fused_recurrent_kda

    from reference.harness import rel_rmse

    ref_o, ref_ht = kda_recurrent(**d)
    args = {n: t for n, t in d.items() if n != "cu_seqlens_cpu"}
    o, ht = fused_recurrent_kda(**d)
    fo, fht = fla_fused_recurrent_kda(**args)
    return (rel_rmse(o, ref_o), rel_rmse(ht, ref_ht)), (rel_rmse(fo, ref_o), rel_rmse(fht, ref_ht))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 1, 32, 32, None), (1, 12, 4, 8, [1, 4, 0, 7])],
                         ids=["decode-B64-H32", "varlen-GVA"])
def test_half_precision_no_worse_than_fla(dtype, shape):
    """Our error against the fp64 oracle is at most fla's (5% for ties in output rounding)."""
    B, T, H, HV, seqlens = shape
    d = make_inputs(B, T, H, HV, 128, 128, dtype=dtype, device="cuda", seqlens=seqlens, initial_state=True,
                    output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                    lower_bound=-5.0, use_beta_sigmoid_in_kernel=True)
    ours, fla = _fla_errors(d, dtype)
    assert ours[0] <= 1.05 * fla[0] and ours[1] <= 1.05 * fla[1], (ours, fla)
    assert max(ours) <= 5e-3


@pytest.mark.gpu
def test_pool_matches_fla_speculative_step():
    """fla's fused_recurrent_kda_fwd with per-token indices and accepted counts (vLLM's call) and ours write the
    same slots with the same states and outputs."""
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    lengths, HV = [3, 1, 2], 8
    d = make_inputs(1, sum(lengths), 4, HV, 128, 128, dtype=torch.bfloat16, device="cuda", seqlens=lengths,
                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                    use_beta_sigmoid_in_kernel=True)
    pool = torch.randn(12, HV, 128, 128, device="cuda")
    idx = torch.tensor([[0, 1, 2], [5, 6, 7], [9, 10, 11]], dtype=torch.int32, device="cuda")
    acc = torch.tensor([2, 1, 3], dtype=torch.int32, device="cuda")
    flags = {n: d[n] for n in ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel",
                                "lower_bound", "A_log", "dt_bias", "cu_seqlens")}
    x = {n: d[n] for n in _TOKEN_INPUTS}
    ours_pool, fla_pool = pool.clone(), pool.clone()
    o, _ = fused_recurrent_kda(**x, **flags, initial_state=ours_pool, ssm_state_indices=idx,
                               num_accepted_tokens=acc, inplace_final_state=True)
    fo, _ = fused_recurrent_kda_fwd(**x, **flags, initial_state=fla_pool, ssm_state_indices=idx,
                                    num_accepted_tokens=acc, inplace_final_state=True)
    assert_close("pool", ours_pool, fla_pool, 1e-5)
    assert_close("o", o, fo, 1e-2)


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager():
    """A decode step captured in a CUDA graph (static inputs, pool and indices on the device) replays the eager
    step on new data."""
    N, HV, slots = 8, 4, 32
    kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
              use_beta_sigmoid_in_kernel=True)
    static = make_inputs(N, 1, 2, HV, 128, 128, dtype=torch.bfloat16, device="cuda", **kw)
    flags = {n: static.pop(n) for n in (*kw, "A_log", "dt_bias", "output_final_state", "allow_neg_eigval",
                                        "state_v_first")}
    pool = torch.randn(slots, HV, 128, 128, device="cuda")
    idx = torch.randperm(slots, device="cuda")[:N].to(torch.int32)
    out = torch.empty(N, 1, HV, 128, dtype=torch.bfloat16, device="cuda")
    graph_pool = pool.clone()

    from benchmarks.decode import capture_graph

    graph = capture_graph(lambda: fused_recurrent_kda(**static, **flags, initial_state=graph_pool,
                                                      ssm_state_indices=idx, inplace_final_state=True, out=out))
    fresh = make_inputs(N, 1, 2, HV, 128, 128, dtype=torch.bfloat16, device="cuda", seed=5, **kw)
    for n in static:
        static[n].copy_(fresh[n])
    graph_pool.copy_(pool)  # the warm-up and the capture stepped it
    graph.replay()
    o_graph = out.clone()
    o_eager, _ = fused_recurrent_kda(**{n: fresh[n] for n in static}, **flags, initial_state=pool,
                                     ssm_state_indices=idx, inplace_final_state=True)
    torch.cuda.synchronize()
    assert torch.equal(o_graph, o_eager) and torch.equal(graph_pool, pool)


@pytest.mark.gpu
def test_direct_launch_equals_the_launch_through_triton(monkeypatch):
    """On a GPU the calls after a signature's first launch the compiled kernel directly: a B64 decode step (Kimi
    flags, bf16) gives the bits of the step without plans, o and pool."""
    kw = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
              use_beta_sigmoid_in_kernel=True)
    d = make_inputs(64, 1, 32, 32, 128, 128, dtype=torch.bfloat16, device="cuda", **kw)
    pool = torch.randn(128, 32, 128, 128, device="cuda")
    idx = torch.randperm(128, device="cuda")[:64].to(torch.int32)
    d.update(initial_state=pool, ssm_state_indices=idx, inplace_final_state=True, check_indices=False)
    decode.clear_plans()
    plain = _run(d, monkeypatch, fast=False)
    for _ in range(3):
        got = _run(d, monkeypatch, fast=True)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[2], plain[2])
    assert [bool(plan.runners) for plan in decode._PLANS.values()] == [True]
