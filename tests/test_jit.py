"""The shared device helpers (`triton_kda/_jit.py`): `_dot`'s product precisions and `_dot_f16x3` against fp64."""
import torch
import triton
import triton.language as tl

from tests.utils import DEVICE, rel_rmse
from triton_kda._jit import _dot, _dot_f16x3

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


@triton.jit
def _dot_f16x3_kernel(a, b, acc, out, N: tl.constexpr):
    o = tl.arange(0, N)
    off = o[:, None] * N + o[None, :]
    tl.store(out + off, _dot_f16x3(tl.load(a + off), tl.load(b + off), tl.load(acc + off)))


def test_dot_f16x3_is_fp32_accurate_across_row_and_column_scales():
    """`_dot_f16x3` (the split itself: `_dot` runs "f16x3" as an fp32 product under the interpreter) on operands whose
    rows of a and columns of b span 2^-60..2^60, one zero row and one zero column, plus an accumulator: every element
    within 2^-20 (9.5e-7) of |acc| + sum_k |a_ik b_kj| of fp64 (measured on an Intel Xeon: 1.6e-7 of it; torch's fp32
    product 1.4e-7), the zero row and column exactly zero."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a, b, acc = (torch.randn(N, N, generator=gen, device=DEVICE) for _ in range(3))
    a *= torch.exp2(torch.randint(-60, 61, (N, 1), generator=gen, device=DEVICE).float())
    b *= torch.exp2(torch.randint(-60, 61, (1, N), generator=gen, device=DEVICE).float())
    a[3], b[:, 5], acc[3], acc[:, 5] = 0.0, 0.0, 0.0, 0.0
    out = torch.full((N, N), float("nan"), device=DEVICE)
    _dot_f16x3_kernel[(1,)](a, b, acc, out, N=N)
    exact = acc.double() + a.double() @ b.double()
    bound = acc.double().abs() + a.double().abs() @ b.double().abs()
    err = ((out.double() - exact).abs() / bound.clamp_min(1e-300)).nan_to_num(0.0)
    assert torch.isfinite(out).all()
    assert float(err.max()) < 2.0 ** -20, float(err.max())
    assert (out[3] == 0).all() and (out[:, 5] == 0).all()
