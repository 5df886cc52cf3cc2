"""chunk_kda inside CUDA graphs: with host lengths (cu_seqlens_cpu, or fixed length) nothing reads a device value on
the host, and during capture the plans are built on the device (no host-to-device copy the graph would depend on).

On the CPU the whole host path (validation, planning, allocation, every launch, forward and backward) runs on meta
tensors, which have no values: any host read of one (``.item()``, ``.tolist()``, ``.cpu()``, ``bool()``) raises.
The kernel launches are recorded instead of run. The GPU tests capture (in the default "global" error mode, where a
sync or a cudaMalloc during capture is an error) and replay.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import triton_kda.chunk_fwd
import triton_kda.state_cp
from benchmarks import stack_check
from tests.utils import make_inputs
from triton_kda import ops
from triton_kda._validate import validate_chunk_kda
from triton_kda.chunk_fwd import _device_varlen_plan, _varlen_plan, plan_chunks
from triton_kda.intra import _kda_intra_fwd_kernel
from triton_kda.state_cp import (
    ENV_MODE,
    ENV_PIECE_CHUNKS,
    _checkpoint_plan,
    _device_piece_plan,
    _piece_plan,
    _slot_table,
)

CPU = torch.device("cpu")


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), (x, y)
        else:
            assert x == y


@pytest.mark.parametrize("lens", [(5,), (64, 0, 65, 1), (0, 130, 7, 0, 300), (1,) * 5],
                         ids=["one", "empty-inside", "empty-first", "ones"])
@pytest.mark.parametrize("BT", [32, 64])
def test_device_built_plans_equal_host_plans(lens, BT):
    cu = torch.tensor([0, *lens]).cumsum(0)
    host = _varlen_plan(lens, BT, CPU)
    _same(_device_varlen_plan(cu.to(torch.int32), lens, BT), host)
    fixed = plan_chunks(3, 130, BT, CPU, None)
    for L in (1, 2, 3, 8):
        _same(_device_piece_plan(host, lens, BT, L), _piece_plan(lens, BT, L, CPU))
        _same(_device_piece_plan(fixed, fixed.lens, BT, L), _piece_plan(fixed.lens, BT, L, CPU))
        _same(_slot_table(_device_piece_plan(host, lens, BT, L), host.NT),
              _checkpoint_plan(lens, BT, L, host.NT, CPU)[1])


class HostToDevice(TorchDispatchMode):
    """Records copies from CPU tensors to meta ones (what a host-to-device copy is on the GPU)."""

    def __init__(self):
        super().__init__()
        self.copies = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args[0].device.type == "cpu" \
                and str(kwargs.get("device", "cpu")) == "meta":
            self.copies.append(tuple(args[0].shape))
        if func is torch.ops.aten.copy_.default and args[0].device.type == "meta" and args[1].device.type == "cpu":
            self.copies.append(tuple(args[1].shape))
        return func(*args, **kwargs)


@pytest.fixture
def launches(monkeypatch):
    """Record the Triton launches instead of running them (meta tensors have no memory)."""
    calls = []
    monkeypatch.setattr(type(_kda_intra_fwd_kernel), "run",
                        lambda self, *args, grid, warmup, **kwargs: calls.append(self.fn.__name__))
    return calls


def _meta_inputs(seqlens, use_gate_in_kernel=False, **_):
    T = sum(seqlens) if seqlens else 150
    d = make_inputs(1 if seqlens else 2, T, 1, 2, 16, 16, device="cpu", seqlens=seqlens or None, initial_state=True,
                    output_final_state=True, use_gate_in_kernel=use_gate_in_kernel)
    return {k: v.to("meta") if isinstance(v, torch.Tensor) and k != "cu_seqlens_cpu" else v for k, v in d.items()}


def _run_op_impls(d, opts):
    """The real forward and backward op bodies on meta inputs (the dispatcher would send meta tensors to the fake
    implementations); returns [(real outputs, fake outputs)] of the backward and, where the meta kernel can size
    them, the forward."""
    p = validate_chunk_kda(d["q"], d["k"], d["v"], d["g"], d["beta"], None, d["initial_state"], True,
                           False, opts.get("use_gate_in_kernel", False), False, False, False, opts.get("lower_bound"),
                           opts.get("disable_recompute", False), False, False, d.get("cu_seqlens"),
                           d.get("cu_seqlens_cpu"), None, False, None,
                           {k: d[k] for k in ("A_log", "dt_bias") if k in d})
    flags = dict(scale=p.scale, chunk_size=32, lower_bound=opts.get("lower_bound"), output_final_state=True,
                 use_qk_l2norm_in_kernel=False, use_gate_in_kernel=opts.get("use_gate_in_kernel", False),
                 use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
                 disable_recompute=opts.get("disable_recompute", False), return_intermediate_states=False,
                 state_v_first=False)
    tensors = dict(q=d["q"], k=d["k"], v=d["v"], g=d["g"], beta=d["beta"], A_log=p.A_log, dt_bias=p.dt_bias,
                   initial_state=d["initial_state"], cu_seqlens=d.get("cu_seqlens"), cu_seqlens_cpu=p.seqlens_cpu)
    o, ht, h, saved = ops.fwd_impl(**tensors, **flags, grad=True)
    bwd_flags = {k: flags[k] for k in ops._BWD_OPTIONS}
    grads = ops.bwd_impl(torch.empty_like(o), torch.empty_like(ht), **tensors, saved=saved, **bwd_flags)
    fake_bwd = ops.chunk_kda_bwd(torch.empty_like(o), torch.empty_like(ht), *tensors.values(), saved,
                                 *bwd_flags.values())
    pairs = [(grads, fake_bwd)]
    if d.get("cu_seqlens") is None:  # varlen training forwards save sizes the meta kernel cannot know (the kept
        # states' count, with disable_recompute the chunk count: both depend on the boundaries' values)
        fake_fwd = ops.chunk_kda_fwd(*tensors.values(), *flags.values(), True)
        pairs.append(((o, ht, h, *saved), (*fake_fwd[:3], *fake_fwd[3])))
    return pairs


CASES = {
    "fixed": ([], {}),
    "varlen": ([40, 0, 110], dict(use_gate_in_kernel=True)),
    "varlen-disable_recompute": ([70, 3, 77], dict(disable_recompute=True)),
}


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "capture"])
@pytest.mark.parametrize("name", list(CASES))
def test_no_device_value_read_on_the_host(name, capture, launches, monkeypatch):
    seqlens, opts = CASES[name]
    # intra-card CP splits every sequence into 1-chunk pieces: its planner and tables run too
    monkeypatch.setenv(ENV_MODE, "1")
    monkeypatch.setenv(ENV_PIECE_CHUNKS, "1")
    for module in (triton_kda.chunk_fwd, triton_kda.state_cp):
        monkeypatch.setattr(module, "capturing", lambda device: capture)
    _varlen_plan.cache_clear()  # a cached host plan would hide its copies
    _piece_plan.cache_clear()
    _checkpoint_plan.cache_clear()
    d = _meta_inputs(seqlens, **opts)
    with HostToDevice() as mode:
        pairs = _run_op_impls(d, opts)
    assert {"_kda_intra_fwd_kernel", "_kda_state_cp_fwd_map_kernel", "_kda_state_bwd_kernel",
            "_kda_state_cp_bwd_chain_kernel", "_kda_intra_bwd_span_kernel"} <= set(launches)  # fp32 inputs
    if capture:
        assert mode.copies == []  # a captured graph would read host memory that is not its own
    for real, fake in pairs:  # the real op bodies give the fake implementations' shapes, dtypes and strides
        for a, b in zip(real, fake, strict=True):
            assert (a.device.type, a.shape, a.dtype, a.stride()) == ("meta", b.shape, b.dtype, b.stride())


def test_without_host_lengths_the_host_reads_the_device(launches):
    """The harness catches a device read: without cu_seqlens_cpu the boundaries must be copied to the host."""
    d = _meta_inputs([40, 0, 110])
    d["cu_seqlens_cpu"] = None
    with pytest.raises(NotImplementedError, match="meta"):
        _run_op_impls(d, {})


def _graph_args(B, T, H):
    return stack_check.build_parser().parse_args(["--B", str(B), "--T", str(T), "--H", str(H), "--K", "128"])


@pytest.mark.gpu
@pytest.mark.parametrize("split", [False, True], ids=["serial", "intracard-cp"])
@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
@pytest.mark.parametrize("mode", ["forward", "forward+backward"])
def test_capture_replays_bit_identical_to_eager(mode, varlen, split, monkeypatch):
    if split:
        monkeypatch.setenv(ENV_MODE, "1")
        monkeypatch.setenv(ENV_PIECE_CHUNKS, "2")
    dev = torch.device("cuda")
    step = stack_check.graph_forward if mode == "forward" else stack_check.graph_forward_backward
    same, _, _ = stack_check.replay_matches_eager(step, stack_check.graph_inputs(_graph_args(2, 700, 2), dev, varlen),
                                                  dev)
    assert same
