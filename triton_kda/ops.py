"""`chunk_kda` as PyTorch custom ops: ``triton_kda::chunk_kda_fwd`` and ``triton_kda::chunk_kda_bwd``.

The public `triton_kda.chunk_kda` validates its arguments on the host and calls `chunk_kda_fwd`; autograd reaches
`chunk_kda_bwd` through the formula registered here. As custom ops with fake implementations (exact shapes, dtypes
and strides for every flag), both are opaque to `torch.compile`: dynamo traces the validation and the op call, never
the planning or the launches, so a compiled module calling `chunk_kda` has no graph break, and the host decisions
below (chunk plan, intra-card CP plan, backend choice) run when the op runs, on real tensors, once per call (or once
per CUDA-graph capture).

Eager calls on plain tensors skip the custom-op dispatch: `forward` runs the same `fwd_impl`, autograd formula and
`bwd_impl` through a `torch.autograd.Function` (half the host time of a training step on the CPU machine with the
kernels stubbed, about 910 -> 470 us: docs/benchmarks/NOTES.md at a24d737); compiled graphs, fake / meta tensors
and tensor subclasses take the ops.

The forward op first asks the backend registry (`triton_kda.backends`) which backend serves op ``chunk_kda_fwd`` on
q's device, passing its verifiers the dict built by `_backend_args`. A compiled backend chosen there is called as

    fn(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, problem, flags)

with q, k, v, g, beta, initial_state and cu_seqlens as the caller gave them (layout untouched), A_log and dt_bias as
resolved by validation (None unless ``use_gate_in_kernel``), ``problem`` the `KDAProblem` (sizes, scale, state
layout, the checked CPU copy of cu_seqlens) and ``flags`` the dict of every boolean option plus ``lower_bound``; it
returns what `chunk_kda` returns (``(o, final_state)``). Backends serve the forward only: the op's backward is the
Triton one, which needs the forward's saved intermediates, so a verifier must decline calls with
``requires_grad=True`` (one that accepts such a call is an error). Otherwise the Triton path runs.

The op's extra outputs are what the backward reads (as fla's forward saves them): Aqk, the row norms, the activated
beta and Akk, from which the backward recomputes w, u, qg, kg and the states; with ``disable_recompute`` every
intra-stage output plus the chunk states h and v_new. They are marked non-differentiable.
"""
import typing

import torch
from torch import Tensor

from triton_kda import backends
from triton_kda._checks import seqlens_on_cpu
from triton_kda._validate import KDAProblem
from triton_kda.chunk_bwd import chunk_bwd
from triton_kda.chunk_fwd import intra_stage, plan_chunks, saved_intermediates
from triton_kda.configs import arch_of, cdiv, fp32_pairs
from triton_kda.state import grad_state_dtype, state_fwd
from triton_kda.state_cp import checkpoint_chunks, state_shape
from triton_kda.wy import IntraOut, wy_recompute

BACKEND_OP = "chunk_kda_fwd"


def _flat(x: Tensor) -> Tensor:
    """[B, T, ...] -> [B*T, ...], contiguous."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]).contiguous()


def _none(q: Tensor) -> Tensor:
    """The placeholder an op returns for an absent output (custom ops cannot return None)."""
    return q.new_empty(0, dtype=torch.float32)


def _problem(q, v, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu, scale: float, chunk_size: int,
             state_v_first: bool) -> KDAProblem:
    """The validated call's `KDAProblem`, rebuilt from the op's arguments. The CPU copy of the boundaries is checked
    here (starts at 0, non-decreasing, ends at T: the same errors as `validate_chunk_kda`), since under tracing the
    caller could not read them; without cu_seqlens_cpu this copies cu_seqlens to the host (a sync)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    seqlens = seqlens_on_cpu(cu_seqlens, cu_seqlens_cpu, T) if cu_seqlens is not None else None
    return KDAProblem(B=B, T=T, H=H, HV=HV, K=K, V=V, N=B if cu_seqlens is None else cu_seqlens.shape[0] - 1,
                      chunk_size=chunk_size, scale=scale, A_log=A_log, dt_bias=dt_bias, state_v_first=state_v_first,
                      seqlens_cpu=seqlens)


def _backend_args(q, k, v, g, beta, initial_state, cu_seqlens, p: KDAProblem, flags: dict, requires_grad: bool) -> dict:
    """What a backend's verifier sees: the tensors, every field of ``p`` (B, T, H, HV, K, V, N, chunk_size, scale,
    A_log, dt_bias, state_v_first, seqlens_cpu), every flag, ``dtype`` (q's), ``varlen`` and ``requires_grad`` (a
    backward may follow: grad mode was on and an input required grad when `chunk_kda` was called). Host-side only."""
    return dict(p._asdict(), **flags, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state,
                cu_seqlens=cu_seqlens, dtype=q.dtype, varlen=cu_seqlens is not None, requires_grad=requires_grad)


def kda_flags(lower_bound: float | None, output_final_state: bool, use_qk_l2norm_in_kernel: bool,
              use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, safe_gate: bool,
              disable_recompute: bool, return_intermediate_states: bool) -> dict:
    """The flags dict the stages and backends read (every boolean option of chunk_kda plus the resolved
    lower_bound); the arguments in the forward op's order."""
    return dict(lower_bound=lower_bound, output_final_state=output_final_state,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
                use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                safe_gate=safe_gate, disable_recompute=disable_recompute,
                return_intermediate_states=return_intermediate_states)


def _stages(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, plan, *, output_final_state: bool,
            store_h: bool, store_v_new: bool, h_dtype: torch.dtype, store_aux: bool, ckpt_every: int):
    """Run the intra and state forward stages on [B, T, ...] inputs; returns (IntraOut, StateOut)."""
    BT = p.chunk_size
    intra = intra_stage(q, k, v, g, beta, A_log, dt_bias, p.scale, plan, BT, flags, store_aux=store_aux)
    st = state_fwd(intra, initial_state.contiguous() if initial_state is not None else None, plan, BT, v.shape[-1],
                   output_final_state=output_final_state, state_v_first=p.state_v_first, store_h=store_h,
                   store_v_new=store_v_new, h_dtype=h_dtype, ckpt_every=ckpt_every)
    return intra, st


def _kept_states_shape(B: int, T: int, HV: int, K: int, V: int, BT: int, elem_size: int, device: torch.device,
                       state_v_first: bool) -> tuple:
    """Shape of the states a fixed-length training forward keeps for its backward (`checkpoint_chunks`): [P, HV, K,
    V] ([P, HV, V, K] V-first), P = 0 where it keeps none."""
    L = checkpoint_chunks((T,) * B, BT, HV, K, V, elem_size, device)
    return state_shape(B * max(1, cdiv(cdiv(T, BT), L)) if L else 0, HV, K, V, state_v_first)


def fwd_impl(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, A_log: Tensor | None, dt_bias: Tensor | None,
    initial_state: Tensor | None, cu_seqlens: Tensor | None, cu_seqlens_cpu: Tensor | None, scale: float,
    chunk_size: int, lower_bound: float | None, output_final_state: bool, use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, safe_gate: bool,
    disable_recompute: bool, return_intermediate_states: bool, state_v_first: bool, grad: bool,
) -> tuple[Tensor, Tensor, Tensor, typing.List[Tensor]]:  # noqa: UP006 (list[Tensor] needs torch >= 2.7)
    """Forward of chunk_kda on validated arguments (`triton_kda.chunk_kda` documents them; A_log, dt_bias and
    lower_bound already resolved: None unless ``use_gate_in_kernel``; cu_seqlens_cpu: the CPU copy of cu_seqlens or
    None; grad: a backward may follow).

    Returns ``(o, final_state, h, saved)``: o ``[B, T, HV, V]`` in q's dtype; final_state ``[N, HV, K, V]`` fp32
    (``[N, HV, V, K]`` with state_v_first), an empty fp32 tensor without ``output_final_state``; h ``[B, NT / B, HV,
    K, V]`` in q's dtype (NT chunks in all; V-first likewise) with ``return_intermediate_states``, else empty; saved:
    what the backward reads (empty without grad; Aqk, rstd_q, rstd_k, beta, Akk and the kept states
    (`state_fwd`'s ckpt_every; [0, HV, K, V] where none are kept); with disable_recompute every `IntraOut` field,
    then h in `grad_state_dtype` and v_new)."""
    p = _problem(q, v, A_log, dt_bias, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, state_v_first)
    flags = kda_flags(lower_bound, output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                      use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, disable_recompute,
                      return_intermediate_states)
    args = _backend_args(q, k, v, g, beta, initial_state, cu_seqlens, p, flags, grad)
    backend = backends.select(BACKEND_OP, args, q.device)
    if backend.fn is not None:
        if grad:
            raise RuntimeError(f"cuda_fast backend {backend.name!r} accepted a chunk_kda call that needs a backward; "
                               f"backends serve the forward only, so its verifier must decline requires_grad=True.")
        o, ht, *h = backend.fn(q, k, v, g, beta, p.A_log, p.dt_bias, initial_state, cu_seqlens, p, flags)
        return (o.contiguous(), ht if output_final_state else _none(q),
                h[0] if return_intermediate_states else q.new_empty(0), [])
    B, T, HV, V = v.shape
    plan = plan_chunks(B, T, p.chunk_size, q.device, p.seqlens_cpu, cu_seqlens)
    # disable_recompute keeps every intermediate (h in grad_state_dtype) instead of what the backward recomputes from;
    # else a training forward also keeps its state every few chunks, where that lets the recompute run in parallel
    keep = disable_recompute and grad
    recompute = grad and not keep
    ckpt_every = checkpoint_chunks(plan.lens, p.chunk_size, HV, p.K, V, q.element_size(), q.device) if recompute else 0
    intra, st = _stages(q, k, v, g, beta, A_log, dt_bias, initial_state, p, flags, plan,
                        output_final_state=output_final_state, store_h=return_intermediate_states or keep,
                        store_v_new=keep, h_dtype=grad_state_dtype(q.dtype) if keep else q.dtype, store_aux=grad,
                        ckpt_every=ckpt_every)
    saved = list(saved_intermediates(intra, st, keep=keep, grad=grad))
    if recompute:
        saved.append(st.kept if st.kept is not None
                     else q.new_empty(state_shape(0, HV, p.K, V, state_v_first), dtype=torch.float32))
    h = st.h.view(B if cu_seqlens is None else 1, -1, *st.h.shape[1:]) if return_intermediate_states else None
    return (st.o.view(B, T, HV, V), st.final_state if output_final_state else _none(q),
            h if h is not None else q.new_empty(0), saved)


chunk_kda_fwd = torch.library.custom_op("triton_kda::chunk_kda_fwd", fwd_impl, mutates_args=())


@chunk_kda_fwd.register_fake
def _(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_cpu, scale, chunk_size, lower_bound,
      output_final_state, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
      safe_gate, disable_recompute, return_intermediate_states, state_v_first, grad):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    BT, TT, dt = chunk_size, B * T, q.dtype
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    state = (V, K) if state_v_first else (K, V)
    keep = disable_recompute and grad
    if cu_seqlens is None:
        NT = B * ((T + BT - 1) // BT)
    elif keep or return_intermediate_states:
        NT = torch.library.get_ctx().new_dynamic_size()  # the chunk count depends on the boundaries' values
    o = q.new_empty(B, T, HV, V)
    ht = q.new_empty(N, HV, *state, dtype=torch.float32) if output_final_state else _none(q)
    if not return_intermediate_states:
        h = q.new_empty(0)
    elif cu_seqlens is None:
        h = q.new_empty(B, NT // B, HV, *state)
    else:
        h = q.new_empty(1, NT, HV, *state)
    a_dt = dt if dt == torch.bfloat16 else torch.float32

    def f32(*shape):
        return q.new_empty(*shape, dtype=torch.float32)

    if keep:
        rows = TT if dt == torch.float32 and fp32_pairs(arch_of(q.device), K) else 0  # IntraOut.rs
        saved = [q.new_empty(TT, HV, BT, dtype=a_dt), q.new_empty(TT, HV, K), q.new_empty(TT, HV, V),
                 q.new_empty(TT, HV, K), q.new_empty(TT, HV, K), f32(NT, HV, K), f32(TT, HV), f32(TT, HV),
                 f32(TT, HV), q.new_empty(TT, HV, BT, dtype=a_dt), f32(rows, HV),
                 q.new_empty(NT, HV, *state, dtype=grad_state_dtype(dt)), q.new_empty(TT, HV, V)]
    elif grad:
        if cu_seqlens is None and isinstance(B, int) and isinstance(T, int):
            kept = _kept_states_shape(B, T, HV, K, V, BT, q.element_size(), q.device, state_v_first)
        else:  # the kept states' count depends on the boundaries' values (or on a symbolic length)
            kept = (torch.library.get_ctx().new_dynamic_size(), HV, *state)
        saved = [q.new_empty(TT, HV, BT, dtype=a_dt), f32(TT, HV), f32(TT, HV), f32(TT, HV),
                 q.new_empty(TT, HV, BT, dtype=a_dt), f32(*kept)]
    else:
        saved = []
    return o, ht, h, saved


def bwd_impl(
    do: Tensor, dht: Tensor | None, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
    A_log: Tensor | None, dt_bias: Tensor | None, initial_state: Tensor | None, cu_seqlens: Tensor | None,
    cu_seqlens_cpu: Tensor | None, saved: typing.List[Tensor], scale: float, chunk_size: int,  # noqa: UP006
    lower_bound: float | None, use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, disable_recompute: bool, state_v_first: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Backward of chunk_kda: ``do`` ``[B, T, HV, V]``, ``dht`` the final-state gradient or None, the forward's
    arguments and its ``saved`` outputs. Returns ``(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0)``, each in its
    input's shape and dtype (dh0 fp32), contiguous; an empty fp32 tensor for an absent A_log, dt_bias or
    initial_state."""
    B, T, HV, V = v.shape
    BT = chunk_size
    # the forward checked the boundaries; without their CPU copy they are copied to the host again (a sync)
    seqlens = (cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens.cpu()) if cu_seqlens is not None else None
    plan = plan_chunks(B, T, BT, q.device, seqlens, cu_seqlens)
    a_log = A_log.reshape(-1) if A_log is not None else None
    dt = dt_bias.reshape(-1) if dt_bias is not None else None
    if disable_recompute:
        intra, h, v_new = IntraOut(*saved[:-2]), saved[-2], saved[-1]
    else:
        *aux, kept = saved
        intra = wy_recompute(_flat(q), _flat(k), _flat(v), _flat(g), a_log, dt, *aux, scale, plan, BT,
                             use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound,
                             use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        st = state_fwd(intra, initial_state.contiguous() if initial_state is not None else None, plan, BT, V,
                       output_final_state=False, state_v_first=state_v_first, store_h=True, store_v_new=True,
                       h_dtype=grad_state_dtype(q.dtype), store_o=False, start=kept if kept.shape[0] else None)
        h, v_new = st.h, st.v_new
    gr = chunk_bwd(
        _flat(do), dht.contiguous() if dht is not None else None, _flat(q), _flat(k), _flat(v), _flat(g),
        _flat(beta), a_log, dt, intra, h, v_new, plan, BT, scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        lower_bound=lower_bound, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first, want_dh0=initial_state is not None,
    )
    return (gr.dq.view_as(q), gr.dk.view_as(k), gr.dv.view_as(v), gr.dg.view_as(g), gr.dbeta.view_as(beta),
            gr.dA_log.view_as(A_log) if gr.dA_log is not None else _none(q),
            gr.ddt_bias.view_as(dt_bias) if gr.ddt_bias is not None else _none(q),
            gr.dh0 if gr.dh0 is not None else _none(q))


chunk_kda_bwd = torch.library.custom_op("triton_kda::chunk_kda_bwd", bwd_impl, mutates_args=())


@chunk_kda_bwd.register_fake
def _(do, dht, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_cpu, saved, scale,
      chunk_size, lower_bound, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
      allow_neg_eigval, disable_recompute, state_v_first):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), g.new_empty(g.shape),
            beta.new_empty(beta.shape), A_log.new_empty(A_log.shape) if A_log is not None else _none(q),
            dt_bias.new_empty(dt_bias.shape) if dt_bias is not None else _none(q),
            initial_state.new_empty(initial_state.shape) if initial_state is not None else _none(q))


_TENSOR_ARGS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens", "cu_seqlens_cpu")
_BWD_OPTIONS = ("scale", "chunk_size", "lower_bound", "use_qk_l2norm_in_kernel", "use_gate_in_kernel",
                "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "disable_recompute", "state_v_first")
_FWD_ARGS = (*_TENSOR_ARGS, "scale", "chunk_size", "lower_bound", "output_final_state", "use_qk_l2norm_in_kernel",
             "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "safe_gate",
             "disable_recompute", "return_intermediate_states", "state_v_first", "grad")


def _setup_context(ctx, inputs, output):
    args = dict(zip(_FWD_ARGS, inputs, strict=True))
    _, _, h, saved = output
    ctx.mark_non_differentiable(h, *saved)
    ctx.save_for_backward(*(args[name] for name in _TENSOR_ARGS), *saved)
    ctx.options = {name: args[name] for name in _BWD_OPTIONS}
    # without grad at the call the forward saved nothing: the op's outputs then carry no gradient to compute
    ctx.options["disable_recompute"] = args["disable_recompute"] and args["grad"]
    ctx.output_final_state, ctx.grad = args["output_final_state"], args["grad"]


def _input_grads(ctx, do, dht, bwd) -> tuple:
    """The gradient of every forward argument (None for those without one) from the outputs' gradients, through
    `bwd` (the backward op, or `bwd_impl` itself)."""
    tensors = dict(zip(_TENSOR_ARGS, ctx.saved_tensors, strict=False))
    if not ctx.grad:
        raise RuntimeError("chunk_kda was called without grad (grad mode off or no input requiring grad), so its "
                           "forward saved nothing to differentiate.")
    if do is None:  # o took no part in the loss (only without materialised gradients)
        do = torch.zeros(tensors["v"].shape, dtype=tensors["q"].dtype, device=tensors["v"].device)
    dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0 = bwd(
        do, dht if ctx.output_final_state else None, **tensors, saved=list(ctx.saved_tensors[len(_TENSOR_ARGS):]),
        **ctx.options)
    present = {name: tensors[name] is not None for name in ("A_log", "dt_bias", "initial_state")}
    return (dq, dk, dv, dg, dbeta, dA_log if present["A_log"] else None, ddt_bias if present["dt_bias"] else None,
            dh0 if present["initial_state"] else None, *(None,) * (len(_FWD_ARGS) - 8))


def _backward(ctx, do, dht, dh, dsaved):
    return _input_grads(ctx, do, dht, chunk_kda_bwd)


chunk_kda_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerChunkKDA(torch.autograd.Function):
    """`chunk_kda_fwd` and its autograd formula without the custom-op dispatch (same saved tensors and outputs, the
    saved ones flattened after o, final_state and h). Gradients are not materialised: no zero-filled gradients of
    the non-differentiable outputs (Aqk, Akk, ...), an unused final state's gradient stays None."""

    @staticmethod
    def forward(ctx, *args):
        o, ht, h, saved = fwd_impl(*args)
        _setup_context(ctx, args, (o, ht, h, saved))
        ctx.set_materialize_grads(False)
        return o, ht, h, *saved

    @staticmethod
    def backward(ctx, do, dht, dh, *dsaved):
        return _input_grads(ctx, do, dht, bwd_impl)


def _plain(x) -> bool:
    """Whether x is no tensor, or a tensor that is neither a subclass (fake, functional, DTensor) nor on meta."""
    return not isinstance(x, Tensor) or (type(x) in (Tensor, torch.nn.Parameter) and x.device.type != "meta")


def forward(*args) -> tuple[Tensor, Tensor, Tensor, typing.List[Tensor]]:  # noqa: UP006
    """`chunk_kda_fwd(*args)` (same arguments and results): under torch.compile and for non-plain tensors the op,
    else `_EagerChunkKDA`, which runs the same code with less host time."""
    if torch.compiler.is_compiling() or not all(_plain(x) for x in args):
        return chunk_kda_fwd(*args)
    o, ht, h, *saved = _EagerChunkKDA.apply(*args)
    return o, ht, h, saved
