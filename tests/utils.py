"""Test helpers: the device under test, the one comparison assertion, a backend output without a backward, and the
shared harness (re-exported)."""
from __future__ import annotations

import torch

from reference.harness import GATE_MODES, case_id, make_inputs, max_abs, rel_rmse

__all__ = ["DEVICE", "GATE_MODES", "NoBackward", "assert_close", "case_id", "make_inputs", "max_abs", "rel_rmse"]

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class NoBackward(torch.autograd.Function):
    """Identity whose backward raises NotImplementedError("no backward here"): wraps a fake backend's outputs to
    make it forward-only."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("no backward here")


def _coord(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), shape))


def assert_close(
    name: str, actual: torch.Tensor, ref: torch.Tensor, rtol: float, *, atol_max: float | None = None
) -> None:
    """Assert `||actual - ref|| / ||ref|| <= rtol` (fp64; absolute norm when `||ref|| == 0`) and, when given,
    `max |actual - ref| <= atol_max`.

    Shapes must match exactly. A NaN/inf in `actual` passes only where `ref` holds the same non-finite value (and
    vice versa); such places are left out of the metrics. The failure message names the tensor and gives its shape,
    rel RMSE, max-abs error and the worst coordinate with both values.
    """
    if tuple(actual.shape) != tuple(ref.shape):
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} differs from the reference shape {tuple(ref.shape)}")
    a = actual.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    finite = torch.isfinite(a) & torch.isfinite(r)
    same_nonfinite = (a == r) | (torch.isnan(a) & torch.isnan(r))
    bad = ~finite & ~same_nonfinite
    if bad.any():
        first = _coord(int(bad.flatten().nonzero()[0]), a.shape)
        raise AssertionError(
            f"{name} {tuple(a.shape)}: {int(bad.sum())} non-finite value(s) not matched in the reference; "
            f"first at {first}: actual {a[first].item()!r}, ref {r[first].item()!r}"
        )
    a_f, r_f = a[finite], r[finite]
    err, worst = rel_rmse(a_f, r_f), max_abs(a_f, r_f)
    if err <= rtol and (atol_max is None or worst <= atol_max):
        return
    diff = torch.where(finite, (a - r).abs(), torch.zeros((), dtype=torch.float64, device=a.device))
    at = _coord(int(diff.flatten().argmax()), a.shape)
    bound = f"rel RMSE {err:.3e} (rtol {rtol:.1e})"
    if atol_max is not None:
        bound += f", max-abs {worst:.3e} (atol_max {atol_max:.1e})"
    else:
        bound += f", max-abs {worst:.3e}"
    raise AssertionError(
        f"{name} {tuple(a.shape)} {actual.dtype}: {bound}; worst at {at}: actual {a[at].item()!r}, ref {r[at].item()!r}"
    )
