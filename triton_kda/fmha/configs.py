"""Launch configurations of the FMHA kernels: frozen dataclasses, picked per call from the device's architecture.

Nothing is read at import time; `fmha_config` looks at the device of the tensors it is given when it is called.

Row packing: a tile's `block_m` rows are `block_t` tokens x `hp` query heads of one kv head (`hp = min(G, block_m)`,
`G = HQ // HKV` the group size), so the kv tile loaded for a block of keys serves every packed head and token.
In gather (top-k) mode every token reads its own keys, so a tile holds one token and `block_m` shrinks to the
number of packed heads (at least 16, the smallest tensor-core tile).

Head dim 512: a `[block_m, 512]` fp32 accumulator does not fit one program's registers at `block_m = 128`; the
table either keeps the whole value dim in one program with `block_m = 64` over 8 warps (two warpgroups, each owning
half of the value columns; Triton computes the scores in both) or splits the value dim across programs
(`block_dv < DV`), each program recomputing the scores `q k^T` of its tile.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

__all__ = ["FmhaConfig", "fmha_config", "num_sms"]


@dataclass(frozen=True)
class FmhaConfig:
    """One launch of the attention kernel.

    block_m: rows of a tile (tokens x packed heads), a power of two >= 16.
    block_n: keys per step of the inner loop, a power of two >= 16.
    block_dv: value columns per program; `block_dv < DV` splits the value dim across programs (scores recomputed).
    num_warps, num_stages: Triton's warps per program and software-pipelining depth.
    """

    block_m: int
    block_n: int
    block_dv: int | None = None
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self):
        for name in ("block_m", "block_n"):
            val = getattr(self, name)
            if not isinstance(val, int) or val < 16 or val & (val - 1):
                raise ValueError(f"FmhaConfig.{name} must be a power of two >= 16, got {val!r}")
        if self.block_dv is not None and (
            not isinstance(self.block_dv, int) or self.block_dv < 16 or self.block_dv & (self.block_dv - 1)
        ):
            raise ValueError(f"FmhaConfig.block_dv must be None or a power of two >= 16, got {self.block_dv!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"FmhaConfig.num_warps must be one of 1, 2, 4, 8, 16, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"FmhaConfig.num_stages must be an int >= 1, got {self.num_stages!r}")


# (D bucket) -> config for Hopper-class parts (sm90, sm100: 227 KB of shared memory per block), from the H100
# sweeps in docs/benchmarks/fmha_H100.md. D = 512 keeps the whole value dim in one program of 8 warps: a value-dim
# split with two programs per SM ((64, 16, 256, 4, 2)) was slower for the causal and the 128-token window prefill.
_SM90_DENSE = {
    64: FmhaConfig(128, 64, None, 4, 3),
    128: FmhaConfig(64, 64, None, 4, 3),
    256: FmhaConfig(128, 64, None, 8, 2),
    512: FmhaConfig(64, 64, None, 8, 2),
}
_SM90_GATHER = {
    64: FmhaConfig(64, 64, None, 4, 3),
    128: FmhaConfig(64, 64, None, 4, 3),
    256: FmhaConfig(64, 64, None, 4, 2),
    512: FmhaConfig(64, 64, None, 8, 2),
}
# Ampere / Ada and anything else: about 100-160 KB of shared memory; keep the kv tile small at large D.
_GENERIC = {
    64: FmhaConfig(128, 64, None, 4, 2),
    128: FmhaConfig(128, 64, None, 8, 2),
    256: FmhaConfig(64, 32, None, 4, 2),
    512: FmhaConfig(64, 32, 256, 4, 1),
}
_INTERPRETER = FmhaConfig(32, 16, None, 4, 1)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=16)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of a CUDA device (cached per device); 1 for the interpreter / CPU tensors."""
    if device.type != "cuda" or _interpreting():
        return 1
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def fmha_config(D: int, G: int, T: int | None, gather: bool, device: torch.device) -> FmhaConfig:
    """The default launch for head dim D (keys), group size G (query heads per kv head), T queries per sequence
    (None when unknown, e.g. varlen), on `device`. Gather mode and short T shrink `block_m` to the rows they fill."""
    if device.type != "cuda" or _interpreting():
        cfg = _INTERPRETER
    else:
        major, _ = _capability(device.index if device.index is not None else torch.cuda.current_device())
        table = (_SM90_GATHER if gather else _SM90_DENSE) if major in (9, 10) else _GENERIC
        cfg = table[min(512, max(64, _pow2_ceil(D)))]
    rows = G if gather else (G * T if T is not None else cfg.block_m)
    block_m = max(16, min(cfg.block_m, _pow2_ceil(rows)))
    if block_m == cfg.block_m:
        return cfg
    return FmhaConfig(block_m, cfg.block_n, cfg.block_dv, cfg.num_warps, cfg.num_stages)
