"""The shared device helpers (`triton_kda/_jit.py`): `_dot`'s product precisions against fp64."""
import torch
import triton
import triton.language as tl

from tests.utils import DEVICE, rel_rmse
from triton_kda._jit import _dot, _rn_tf32

N = 32


@triton.jit
def _dot_kernel(a, b, out, PREC: tl.constexpr, ROUND_A: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    off = o[:, None] * N + o[None, :]
    b_a = tl.load(a + off)
    if ROUND_A:
        b_a = _rn_tf32(b_a)
    tl.store(out + off, _dot(b_a, tl.load(b + off), None, PREC))


def _product(prec: str, round_a: bool = False, seed: int = 0) -> tuple[float, torch.Tensor]:
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    a, b = (torch.randn(N, N, generator=gen, device=DEVICE) for _ in range(2))
    out = torch.full((N, N), float("nan"), device=DEVICE)
    _dot_kernel[(1,)](a, b, out, PREC=prec, ROUND_A=round_a, N=N)
    a64 = a.double()
    if round_a:  # the reference takes the operand the kernel used
        a64 = ((a.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32).double()
    return float(rel_rmse(out, a64 @ b.double())), out


def test_dot_split_rounds_only_the_a_side():
    """"tf32split" rounds a to TF32 and splits b in two TF32 parts: with a already TF32 the product is fp32-exact;
    otherwise its error is a's rounding alone, about 1/sqrt(2) of "tf32rn"'s (both operands rounded)."""
    rn, _ = _product("tf32rn")
    split, _ = _product("tf32split")
    ieee, _ = _product("ieee")
    exact_a, _ = _product("tf32split", round_a=True)
    assert ieee < 1e-6 and exact_a < 1e-6, (ieee, exact_a)
    assert 1e-4 < rn < 1e-3, rn                     # TF32: 10 mantissa bits, rounded to nearest
    assert 0.5 * rn < split < 0.9 * rn, (split, rn)  # 0.70x on an AMD EPYC
