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

Sliding windows whose keys fit one block (`WindowConfig`, window.py): when a tile's key span `window + block_t - 1`
is at most `WINDOW_MAX_KEYS`, the scores of all its keys are one `[block_m, block_k]` product accumulated over
`block_d`-column slices of q and k, the softmax is exact in one step, and the output is produced `block_dv` columns
at a time and stored at once: no running accumulator, so D = 512 needs no value split and few registers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from triton_kda.configs import arch_of, pow2_ceil

__all__ = ["WINDOW_MAX_KEYS", "FmhaConfig", "WindowConfig", "fmha_config", "window_config",
           "window_keys", "window_tokens"]


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
        _check_pow2("FmhaConfig", "block_m", self.block_m)
        _check_pow2("FmhaConfig", "block_n", self.block_n)
        _check_pow2("FmhaConfig", "block_dv", self.block_dv, allow_none=True)
        _check_launch("FmhaConfig", self.num_warps, self.num_stages)


def _check_pow2(owner: str, name: str, val, allow_none: bool = False) -> None:
    if val is None and allow_none:
        return
    if isinstance(val, bool) or not isinstance(val, int) or val < 16 or val & (val - 1):
        extra = "None or " if allow_none else ""
        raise ValueError(f"{owner}.{name} must be {extra}a power of two >= 16, got {val!r}")


def _check_launch(owner: str, num_warps, num_stages) -> None:
    if num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"{owner}.num_warps must be one of 1, 2, 4, 8, 16, got {num_warps!r}")
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"{owner}.num_stages must be an int >= 1, got {num_stages!r}")


@dataclass(frozen=True)
class WindowConfig:
    """One launch of the single-block sliding-window kernel (window.py).

    block_m: rows of a tile (tokens x packed heads), a power of two >= 16.
    block_d: columns of q and k per step of the score product (the head dim D is walked in these slices).
    block_dv: value columns per step of the output product (each step's output slice is stored at once).
    num_warps, num_stages: Triton's warps per program and software-pipelining depth of both loops.
    The key block itself is sized from the call: the smallest power of two >= the tile's key span.
    """

    block_m: int
    block_d: int
    block_dv: int
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self):
        for name in ("block_m", "block_d", "block_dv"):
            _check_pow2("WindowConfig", name, getattr(self, name))
        _check_launch("WindowConfig", self.num_warps, self.num_stages)


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

# Single-block window kernel: one warpgroup per tile of 64 rows (MQA with 64+ query heads: one token per tile, so a
# 128-key window is one block of 128 keys). Small slices keep shared memory low enough for several programs per SM.
_SM90_WINDOW = WindowConfig(64, 64, 64, 4, 3)
_GENERIC_WINDOW = WindowConfig(64, 64, 64, 4, 2)
_INTERPRETER_WINDOW = WindowConfig(32, 16, 16, 4, 1)
# Largest key block of the window kernel (its scores are a [block_m, block_k] fp32 tile in registers).
WINDOW_MAX_KEYS = 256
# Largest span the default picks the window kernel for; a 129-256 key span wastes up to half of the block.
_WINDOW_DEFAULT_KEYS = 128


def _fit_rows(cfg, G: int, T: int | None, gather: bool = False):
    """`cfg` (an FmhaConfig or WindowConfig) with `block_m` shrunk to the rows a tile fills: G packed heads in gather
    mode, G x T for T known queries per sequence, at least 16 (the smallest tensor-core tile)."""
    rows = G if gather else (G * T if T is not None else cfg.block_m)
    return replace(cfg, block_m=max(16, min(cfg.block_m, pow2_ceil(rows))))


def _hopper_class(arch: int) -> bool:
    return arch // 10 in (9, 10)


def smem_limit(arch: int) -> int:
    """Shared memory one block may use on compute capability `arch` (bytes)."""
    if _hopper_class(arch):
        return 232448
    return 166912 if arch == 80 else 101376


def online_smem(cfg: FmhaConfig, D: int, DV: int, itemsize: int, same_kv: bool) -> int:
    """Shared memory of the online-softmax kernel (bytes): the q tile and `num_stages` buffered key blocks (and
    value blocks unless k and v are one tensor). Matches Triton's allocation on the H100 (D = 512: 192 KB)."""
    block_dv = min(DV, cfg.block_dv or DV)
    per_key = D if same_kv and block_dv == D else D + block_dv
    return itemsize * (cfg.num_stages * cfg.block_n * per_key + cfg.block_m * D)


def fit_smem(cfg: FmhaConfig, D: int, DV: int, itemsize: int, same_kv: bool, budget: int) -> FmhaConfig:
    """Shrink a table entry until `online_smem` fits `budget`: halve block_n (down to 16), then drop stages, then
    halve block_m (fp32 inputs, separate k / v at large D and the smaller GPUs need it)."""
    while online_smem(cfg, D, DV, itemsize, same_kv) > budget:
        if cfg.block_n > 16:
            cfg = replace(cfg, block_n=cfg.block_n // 2)
        elif cfg.num_stages > 1:
            cfg = replace(cfg, num_stages=cfg.num_stages - 1)
        elif cfg.block_m > 16:
            cfg = replace(cfg, block_m=cfg.block_m // 2)
        else:
            break
    return cfg


def arch_config(
    arch: int, D: int, G: int, T: int | None, gather: bool, *, DV: int | None = None, itemsize: int = 2,
    same_kv: bool = True,
) -> FmhaConfig:
    """The online-softmax kernel's launch on compute capability `arch` (see `fmha_config`), shrunk to fit the
    arch's shared memory."""
    table = (_SM90_GATHER if gather else _SM90_DENSE) if _hopper_class(arch) else _GENERIC
    cfg = _fit_rows(table[min(512, max(64, pow2_ceil(D)))], G, T, gather)
    return fit_smem(cfg, D, DV or D, itemsize, same_kv, smem_limit(arch))


def fmha_config(
    D: int, G: int, T: int | None, gather: bool, device: torch.device, *, DV: int | None = None, itemsize: int = 2,
    same_kv: bool = True,
) -> FmhaConfig:
    """The default launch for head dim D (keys; DV values, default D), group size G (query heads per kv head), T
    queries per sequence (None when unknown, e.g. varlen), inputs of `itemsize` bytes, k and v one tensor or not,
    on `device`. Gather mode and short T shrink `block_m` to the rows they fill; the entry is then shrunk to fit the
    GPU's shared memory (fp32, separate k and v at D = 512, the smaller GPUs)."""
    arch = arch_of(device)
    if not arch:  # the interpreter
        return _fit_rows(_INTERPRETER, G, T, gather)
    return arch_config(arch, D, G, T, gather, DV=DV, itemsize=itemsize, same_kv=same_kv)


def window_tokens(block_m: int, G: int) -> int:
    """Tokens per tile of the window kernel: the tile's rows are tokens x min(G, block_m) packed heads."""
    return block_m // min(G, block_m)


def window_keys(window: int, block_m: int, G: int, T: int | None) -> int:
    """Key block of the window kernel: the smallest power of two (>= 16) holding a tile's key span, `window` plus
    the tile's tokens (at most T of them when the queries per sequence are known) minus one."""
    tokens = window_tokens(block_m, G)
    if T is not None:
        tokens = min(tokens, T)
    return pow2_ceil(max(16, window + tokens - 1))


def window_arch_config(arch: int, G: int, T: int | None, window: int) -> WindowConfig | None:
    """The window kernel's launch on compute capability `arch` (see `window_config`)."""
    return _window_fit(_SM90_WINDOW if _hopper_class(arch) else _GENERIC_WINDOW, G, T, window)


def _window_fit(cfg: WindowConfig, G: int, T: int | None, window: int) -> WindowConfig | None:
    cfg = _fit_rows(cfg, G, T)
    return cfg if window_keys(window, cfg.block_m, G, T) <= _WINDOW_DEFAULT_KEYS else None


def window_config(G: int, T: int | None, window: int, device: torch.device) -> WindowConfig | None:
    """The default launch of the single-block window kernel for group size G, T queries per sequence (None when
    unknown) and a sliding window of `window` keys, or None when a tile's keys do not fit one block of
    `_WINDOW_DEFAULT_KEYS` (the online-softmax kernel then runs)."""
    arch = arch_of(device)
    if not arch:  # the interpreter
        return _window_fit(_INTERPRETER_WINDOW, G, T, window)
    return window_arch_config(arch, G, T, window)
