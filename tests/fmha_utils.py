"""Helpers shared by the FMHA tests: seeded fp64-drawn inputs on the device under test, the fp32 oracle check of an
(o, lse) pair, and cosine similarity."""
from __future__ import annotations

import torch

from tests.utils import DEVICE, assert_close

FP32_TOL = 1e-5


def randn(*shape, gen: torch.Generator, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Standard normal draws (fp64 on the CPU generator `gen`, times `scale`), cast to `dtype` on DEVICE."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(device=DEVICE, dtype=dtype)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sink_logits(hq: int, gen: torch.Generator) -> torch.Tensor:
    """One sink logit per query head, scale 2."""
    return randn(hq, gen=gen, scale=2.0)


def check_attn(out, ref, tol: float = FP32_TOL) -> None:
    """Assert an FmhaOutput's o and lse against the oracle's (o, lse) at relative RMSE `tol`."""
    assert_close("o", out.o, ref[0], tol)
    assert_close("lse", out.lse, ref[1], tol)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten().to(a.device)
    return float(torch.dot(a, b) / (a.norm() * b.norm()))
