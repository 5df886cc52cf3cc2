"""The shared device helpers (`triton_kda/_jit.py`): `_dot`'s product precisions against fp64."""
import torch
import triton
import triton.language as tl

from tests.utils import DEVICE, rel_rmse
from triton_kda._jit import _dot

N = 32


@triton.jit
def _dot_kernel(a, b, out, PREC: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    off = o[:, None] * N + o[None, :]
    tl.store(out + off, _dot(tl.load(a + off), tl.load(b + off), None, PREC))


def _rn_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 x rounded to the nearest TF32 value, as `_jit._rn_tf32`."""
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def test_dot_split_rounds_only_the_a_side():
    """"tf32split" rounds a to TF32 and splits b in two TF32 parts: its product is round(a) @ b to fp32 accuracy,
    while "tf32rn" (both operands rounded) is TF32-accurate only. Measured on an AMD EPYC: ieee 9.9e-8, split against
    round(a) @ b 1.1e-7, tf32rn 3.1e-4."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a, b = (torch.randn(N, N, generator=gen, device=DEVICE) for _ in range(2))
    exact, rounded_a = a.double() @ b.double(), _rn_tf32(a).double() @ b.double()
    err = {}
    for prec, ref in (("ieee", exact), ("tf32split", rounded_a), ("tf32rn", exact)):
        out = torch.full((N, N), float("nan"), device=DEVICE)
        _dot_kernel[(1,)](a, b, out, PREC=prec, N=N)
        err[prec] = float(rel_rmse(out, ref))
    assert err["ieee"] < 1e-6 and err["tf32split"] < 1e-6, err
    assert 1e-4 < err["tf32rn"] < 1e-3, err  # TF32: 10 mantissa bits, rounded to nearest
