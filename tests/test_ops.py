"""`triton_kda.ops.forward`: eager calls on plain tensors run the custom op's code through `_EagerChunkKDA` (no
custom-op dispatch) and give the op's outputs and gradients bit for bit, whichever outputs the loss uses; meta and
fake tensors (and torch.compile, tests/test_compile.py) take the op."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.utils import DEVICE, make_inputs
from triton_kda import chunk_kda, ops

GRAD_NAMES = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")


def _run(d, use):
    """o, final_state and the gradients of every leaf of d for a loss on `use` ("o", "ht" or both)."""
    o, ht = chunk_kda(**d)
    gen = torch.Generator(device=o.device).manual_seed(1)
    do, dht = (torch.randn(t.shape, generator=gen, device=t.device).to(t.dtype) for t in (o, ht))
    outs, grads = zip(*[(t, g) for name, t, g in (("o", o, do), ("ht", ht, dht)) if name in use], strict=True)
    leaves = [d[n] for n in GRAD_NAMES if d.get(n) is not None]
    return [o, ht, *torch.autograd.grad(outs, leaves, grads)]


@pytest.mark.parametrize("use", [("o", "ht"), ("o",), ("ht",)], ids=["o-ht", "o-only", "ht-only"])
def test_eager_function_matches_the_op_bit_for_bit(use, monkeypatch):
    d = make_inputs(2, 70, 1, 2, 16, 16, device=DEVICE, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                    initial_state=True, output_final_state=True, requires_grad=True)
    eager = _run(d, use)
    assert type(eager[0].grad_fn).__name__ == "_EagerChunkKDABackward"
    monkeypatch.setattr(ops, "forward", ops.chunk_kda_fwd)
    op = _run(d, use)
    assert type(op[0].grad_fn).__name__ != "_EagerChunkKDABackward"
    for name, a, b in zip(("o", "final_state", *GRAD_NAMES), eager, op, strict=True):
        assert torch.equal(a, b), f"{name} differs between the eager Function and the op"


def test_meta_and_fake_tensors_take_the_op():
    d = make_inputs(1, 40, 1, 2, 16, 16, device="cpu", requires_grad=True, output_final_state=True)
    meta = {k: v.detach().to("meta").requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
            for k, v in d.items()}
    o, ht = chunk_kda(**meta)
    assert o.device.type == "meta" and o.shape == (1, 40, 2, 16) and ht.shape == (1, 2, 16, 16)
    assert type(o.grad_fn).__name__ != "_EagerChunkKDABackward"
    with FakeTensorMode() as mode:
        o, _ = chunk_kda(**{k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in d.items()})
        assert o.shape == (1, 40, 2, 16) and type(o.grad_fn).__name__ != "_EagerChunkKDABackward"
