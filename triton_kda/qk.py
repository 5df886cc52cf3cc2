"""q/k stage backward: the per-v-head gradients summed over each GVA group and taken back through the in-kernel
l2norm."""
import torch
import triton
import triton.language as tl

from triton_kda.configs import _kpad, arch_of, cdiv
from triton_kda.launch import launch_kernel


@triton.jit
def _kda_qk_bwd_kernel(x, dx_part, dx, TT, H: tl.constexpr, G: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, USE_L2NORM: tl.constexpr):
    """x: [TT, H, K] (q or k as passed), dx_part: [TT, H * G, K] fp32 per-v-head gradients w.r.t. the normalised x;
    writes dx [TT, H, K] in x's dtype:  d = sum_g dx_part,  dx = r (d - xh (xh . d)),  xh = r x,
    r = (|x|^2 + 1e-6)^-1/2 (dx = d without the in-kernel l2norm)."""
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    o_t = (i_t * BT + tl.arange(0, BT)).to(tl.int64)
    o_k = tl.arange(0, BK)
    m = (o_t < TT)[:, None] & (o_k < K)[None, :]
    b_d = tl.zeros((BT, BK), dtype=tl.float32)
    for i_g in range(G):
        b_d += tl.load(dx_part + (o_t[:, None] * (H * G) + i_h * G + i_g) * K + o_k[None, :], mask=m, other=0.0)
    p_x = (o_t[:, None] * H + i_h) * K + o_k[None, :]
    if USE_L2NORM:
        b_x = tl.load(x + p_x, mask=m, other=0.0).to(tl.float32)
        b_r = 1.0 / tl.sqrt(tl.sum(b_x * b_x, axis=1) + 1e-6)
        b_xh = b_x * b_r[:, None]
        b_d = b_r[:, None] * (b_d - b_xh * tl.sum(b_xh * b_d, axis=1)[:, None])
    tl.store(dx + p_x, b_d.to(dx.dtype.element_ty), mask=m)


def qk_bwd(x: torch.Tensor, dx_part: torch.Tensor, *, use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
    """Sum the per-v-head partials dx_part [TT, HV, K] fp32 over each GVA group and take them back through the
    in-kernel l2norm; returns dx [TT, H, K] in x's dtype (x: [TT, H, K], contiguous)."""
    TT, H, K = x.shape
    dx = torch.empty_like(x)
    BT = 32
    launch_kernel(_kda_qk_bwd_kernel, (cdiv(TT, BT), H),
        x, dx_part, dx, TT, H=H, G=dx_part.shape[1] // H, K=K, BT=BT, BK=_kpad(K, arch_of(x.device)),
        USE_L2NORM=use_qk_l2norm_in_kernel,
    )
    return dx
