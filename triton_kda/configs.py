"""Launch configurations, one small table per architecture; read lazily per device, never at import.

The table needs no tuning on a first call. With `TRITON_KDA_AUTOTUNE=1` the heaviest launches (intra forward, state
forward, chunk-local backward) instead time the table's entry and a few alternatives once per problem key and keep
the fastest for the process (`tuned`); the alternatives are configurations known to compile and give correct
results (the intra forward, for one, gives wrong outputs with 2 pipeline stages on triton 3.6, so none is offered).
"""
from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, TypeVar

import torch
import triton

logger = logging.getLogger("triton_kda.autotune")
C = TypeVar("C")


@dataclass(frozen=True)
class IntraConfig:
    BC: int        # sub-block rows of the intra-chunk factorisation
    BK: int        # K slice width
    BV: int        # V slice width for u
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class StateConfig:
    BV: int        # V block per program of the recurrence
    num_warps: int
    num_stages: int


def is_interpreter() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def autotune_enabled() -> bool:
    """TRITON_KDA_AUTOTUNE=1 (read on every call; off under the interpreter, which cannot time kernels)."""
    value = os.environ.get("TRITON_KDA_AUTOTUNE", "0")
    if value not in ("0", "1"):
        raise ValueError(f"TRITON_KDA_AUTOTUNE must be 0 or 1, got {value!r}")
    return value == "1" and not is_interpreter()


_TUNED: dict[tuple, object] = {}


def tuned(key: tuple, default: C, candidates: Sequence[C], run: Callable[[C], object],
          bench: Callable[[Callable[[], object]], float] | None = None) -> C:
    """The configuration to launch with for `key` (a tuple naming the kernel and the problem): `default` (the
    table's), or with TRITON_KDA_AUTOTUNE=1 the fastest of `default` and `candidates` by the median time of
    `run(cfg)` (which launches the kernel on the caller's inputs), measured the first time `key` is seen and then
    remembered for the process. `bench` times a callable in ms (default `triton.testing.do_bench`). A candidate that
    raises (e.g. more shared memory than this GPU has) is skipped with a warning; the default never is."""
    if not autotune_enabled():
        return default
    if key not in _TUNED:
        if bench is None:
            from triton.testing import do_bench

            def bench(fn):
                return do_bench(fn, warmup=5, rep=25, return_mode="median")

        times = {default: bench(lambda: run(default))}
        for cfg in dict.fromkeys(candidates):
            if cfg in times:
                continue
            try:
                times[cfg] = bench(lambda cfg=cfg: run(cfg))
            except Exception as exc:  # a candidate this GPU cannot run is not a choice, not an error
                logger.warning("autotune %s: skipped %s: %s: %s", key, cfg, type(exc).__name__, exc)
        _TUNED[key] = min(times, key=times.get)
        logger.info("autotuned %s: %s (%s)", key, _TUNED[key],
                    ", ".join(f"{cfg}: {ms:.3f} ms" for cfg, ms in times.items()))
    return _TUNED[key]


@dataclass(frozen=True)
class CPConfig:
    BC: int            # columns of [M | E] per program of the intra-card CP map kernels
    num_warps: int
    num_stages: int
    chain_BV: int      # V block per program of the CP chain kernels
    chain_BKC: int     # rows of the state (columns of a map) per product of the chain kernels
    chain_warps: int


@functools.cache
def device_arch(device_index: int) -> int:
    """Compute capability as 80, 86, 89, 90, 100, 120 (0 for the CPU interpreter)."""
    if device_index < 0:
        return 0
    major, minor = torch.cuda.get_device_capability(device_index)
    return major * 10 + minor


@functools.cache
def _device_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of `device`, read once per device (1 for the CPU interpreter)."""
    if device.type != "cuda" or is_interpreter():
        return 1
    return _device_sms(device.index if device.index is not None else torch.cuda.current_device())


def arch_of(device: torch.device) -> int:
    if device.type != "cuda" or is_interpreter():
        return 0
    return device_arch(device.index if device.index is not None else torch.cuda.current_device())


def capturing(device: torch.device) -> bool:
    """Whether work for `device` is being captured into a CUDA graph (a host-side query, no sync): plans are then
    built on the device from tensors already there, never copied from the host."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _kpad(K: int, arch: int) -> int:
    """Tile width covering a head dim of K: a power of two, at least 16 in the interpreter and 32 on GPUs (16-wide
    K or V tiles gave illegal addresses and wrong outputs in bf16/fp16 products on sm_90, triton 3.6, NOTES.md)."""
    return max(16 if arch == 0 else 32, triton.next_power_of_2(K))


def intra_config(arch: int, K: int, V: int) -> IntraConfig:
    BV = min(64, _kpad(V, arch))
    if arch == 0:
        return IntraConfig(BC=16, BK=min(64, _kpad(K, arch)), BV=BV, num_warps=4, num_stages=1)
    # H100 (triton 3.6), B2 T8192 H32 K=V=128 bf16, Kimi flags, intra_fwd alone (do_bench median): BK 32 / 4 warps
    # 1.50-1.51 ms, whole forward 1.87-1.88 ms (the two-pass kernel before it: 2.14-2.17 ms, forward 2.49 ms). On an
    # earlier one-pass build: a 168-register cap 1.61 ms, 128 registers 3.22 ms; 8 warps 2.41 ms, BK 64 / 8 warps 2.37.
    return IntraConfig(BC=16, BK=32, BV=BV, num_warps=4, num_stages=1)


def intra_candidates(arch: int, K: int, V: int) -> list[IntraConfig]:
    """Alternatives to `intra_config` for TRITON_KDA_AUTOTUNE (one pipeline stage: 2 gave wrong outputs)."""
    base = intra_config(arch, K, V)
    return [IntraConfig(BC=16, BK=bk, BV=base.BV, num_warps=w, num_stages=1)
            for bk in (32, 64) if bk <= _kpad(K, arch) for w in (4, 8)]


def wy_fwd_config(arch: int, K: int, V: int) -> IntraConfig:
    """The backward's WY recompute: the intra forward's tiles (its products must round as the forward's) and 3
    pipeline stages (Triton's default, with which it was measured: 0.46-0.49 ms at B2 T8192 H32 on an H200)."""
    return replace(intra_config(arch, K, V), num_stages=3)


def wy_bwd_config(arch: int, K: int, V: int) -> IntraConfig:
    """The WY backward (one program per chunk and v-head, V slices of BV; with fp32 inputs K slices of BK inside)."""
    return IntraConfig(BC=16, BK=min(64, _kpad(K, arch)), BV=min(32 if arch == 0 else 64, _kpad(V, arch)), num_warps=4,
                       num_stages=1)


def intra_bwd_config(arch: int, K: int, V: int) -> IntraConfig:
    """The chunk-local backward (one program per BC-row block of a chunk, v-head and K slice of BK)."""
    if arch == 0:
        return IntraConfig(BC=16, BK=min(32, _kpad(K, arch)), BV=min(32, _kpad(V, arch)), num_warps=4, num_stages=1)
    # H100 B2 T8192 H32 K128 bf16 (docs/benchmarks/NOTES.md): BK 64 / BV 64 / 4 warps / 2 stages 4.13 ms; 1 stage
    # 5.09, BV 32 5.89, BV 128 5.99, BK 128 / 8 warps 6.34, BK 32 / 2 stages 6.56, BK 32 / 8 warps 15.4
    return IntraConfig(BC=16, BK=min(64, _kpad(K, arch)), BV=min(64, _kpad(V, arch)), num_warps=4, num_stages=2)


def intra_bwd_candidates(arch: int, K: int, V: int) -> list[IntraConfig]:
    """Alternatives to `intra_bwd_config` for TRITON_KDA_AUTOTUNE: the configurations of the H100 sweep (NOTES.md)."""
    kp, vp = _kpad(K, arch), _kpad(V, arch)
    return [IntraConfig(BC=16, BK=min(bk, kp), BV=min(bv, vp), num_warps=w, num_stages=s)
            for bk, bv, w, s in ((64, 64, 4, 1), (64, 32, 4, 2), (32, 64, 4, 2), (128, 64, 8, 1))]


class GateBwdConfig(NamedTuple):
    BK: int        # K slice width
    num_warps: int


def gate_bwd_config(arch: int, K: int) -> GateBwdConfig:
    """The gate backward (one program per chunk, v-head and K slice: a reverse cumsum and elementwise work)."""
    return GateBwdConfig(BK=min(32 if arch == 0 else 64, _kpad(K, arch)), num_warps=4)


def state_config(arch: int, K: int, V: int, elem_size: int) -> StateConfig:
    """elem_size: bytes per element of the stored intermediates (2 for bf16/fp16, 4 for fp32)."""
    BK = _kpad(K, arch)
    if arch == 0:
        return StateConfig(BV=min(32, _kpad(V, arch)), num_warps=4, num_stages=1)
    if elem_size == 2:
        BV = 64 if BK <= 128 else 32
    else:
        BV = 32 if BK <= 128 else 16
    # double-buffer the chunk loads only for rows of <= 256 bytes: triton 3.6 pipelines the chunk loop deeper than
    # 3.7 and ran out of shared memory on sm90 at bf16 BK = 256 with two stages (237568 B > 232448 B)
    # H100 bf16 K128 (docs/benchmarks/NOTES.md): 3 stages 0.35 ms, 2 stages 0.43 ms
    stages = 3 if elem_size == 2 and BK <= 128 else 2 if elem_size * BK <= 256 else 1
    return StateConfig(BV=min(BV, _kpad(V, arch)), num_warps=4, num_stages=stages)


def state_candidates(arch: int, K: int, V: int, elem_size: int) -> list[StateConfig]:
    """Alternatives to `state_config` for TRITON_KDA_AUTOTUNE: narrower V blocks and fewer pipeline stages (never
    more than the table's, which are bounded by shared memory)."""
    base = state_config(arch, K, V, elem_size)
    widths = [base.BV] + ([base.BV // 2] if base.BV // 2 >= 32 else [])
    return [StateConfig(BV=bv, num_warps=4, num_stages=s) for bv in widths for s in range(1, base.num_stages + 1)]


def cp_config(arch: int, K: int, V: int, elem_size: int) -> CPConfig:
    """Launch configuration of the intra-card CP kernels (state_cp.py); elem_size as in `state_config`. The map
    kernels carry a [K, BC] fp32 block, like the serial kernel's [K, BV]; the chain kernels a [K, chain_BV] state and
    [K, chain_BKC] slices of a map."""
    BK = _kpad(K, arch)
    if arch == 0:
        return CPConfig(BC=min(32, _kpad(max(K, V), arch)), num_warps=4, num_stages=1, chain_BV=16, chain_BKC=16,
                        chain_warps=4)
    if elem_size == 2:
        BC = 64 if BK <= 128 else 32
    else:
        BC = 32 if BK <= 128 else 16
    # sm_90 ptxas, K = V = 128 bf16 BT 64: the map kernels spill 456-660 B at 4 warps, 0-12 B at 8; the chain kernels
    # spill at 4 warps or with [256, 32] states, not at 8 warps with the blocks below
    return CPConfig(BC=BC, num_warps=8, num_stages=1, chain_BV=32 if BK <= 128 else 16, chain_BKC=32,
                    chain_warps=8)


@dataclass(frozen=True)
class RecurrentConfig:
    BV: int        # V block per program of the token recurrence: the program holds a [K, BV] fp32 state
    num_warps: int


@dataclass(frozen=True)
class RecurrentBwdConfig:
    BV: int        # V block per program of the reverse pass (holds the state and its gradient)
    C: int         # tokens between the state checkpoints the reverse pass replays from
    num_warps: int
    input_warps: int  # of the kernel that turns the reverse pass's partial sums into input gradients


def recurrent_fwd_config(arch: int, K: int, V: int, heads: int, sms: int) -> RecurrentConfig:
    """The decode / token-recurrence forward (recurrent.py): one program per (sequence, v-head, V block) reads and
    writes each state element once, so the launch is memory-bound; ``heads`` = N * HV, ``sms`` the GPU's SM count.
    32-wide blocks when they give at least two programs per SM, else 16-wide ones (more programs in flight for
    small batches). sm_90 ptxas (triton 3.7), K = V = 128: 96 registers at BV 32, 74 at BV 16, no spills. Not
    timed on a GPU yet: `benchmarks/decode_check.py` sweeps the alternatives."""
    if arch == 0:
        return RecurrentConfig(BV=min(16, triton.next_power_of_2(V)), num_warps=4)
    BK = _kpad(K, arch)
    BV = 32 if heads * triton.cdiv(V, 32) >= 2 * sms else 16
    return RecurrentConfig(BV=min(BV, triton.next_power_of_2(V)), num_warps=4 if BK <= 128 else 8)


def recurrent_fwd_candidates(arch: int, K: int, V: int) -> list[RecurrentConfig]:
    """Alternatives to `recurrent_fwd_config` that `benchmarks/decode_check.py` times (not TRITON_KDA_AUTOTUNE:
    timing a launch that updates a state pool in place would apply the update once per trial)."""
    vp = triton.next_power_of_2(V)
    pairs = ((8, 1), (16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (32, 8), (64, 4), (64, 8), (128, 8))
    return [RecurrentConfig(BV=bv, num_warps=w) for bv, w in pairs if bv <= vp]


def recurrent_bwd_config(arch: int, K: int, V: int) -> RecurrentBwdConfig:
    """The reverse pass of fused_recurrent_kda's backward: state, its gradient and three temporaries of [K, BV]
    fp32 live at once, hence narrow V blocks. C = 8 replays 3.5 steps per token on average and keeps one
    checkpoint per 8 tokens; the interpreter uses C = 4 so that small tests cross several checkpoints."""
    if arch == 0:
        return RecurrentBwdConfig(BV=min(16, triton.next_power_of_2(V)), C=4, num_warps=4, input_warps=4)
    BK = _kpad(K, arch)
    # sm_90 ptxas (triton 3.7): 213 registers at K = 128 and 4 warps, 210 at K = 256 and 8 warps, no spills
    return RecurrentBwdConfig(BV=min(16, triton.next_power_of_2(V)), C=8, num_warps=4 if BK <= 128 else 8,
                              input_warps=4)


def pool_copy_config(arch: int) -> tuple[int, int]:
    """(BLOCK, num_warps) of the state-pool gather/scatter copies (pool.py): BLOCK elements per program."""
    return (256, 4) if arch == 0 else (2048, 4)


class CompileSpec(NamedTuple):
    name: str
    fn: object
    signature: dict
    constexprs: dict
    num_warps: int
    num_stages: int


_DTYPES = {"bf16": ("bf16", True, torch.bfloat16), "fp16": ("fp16", False, torch.float16),
           "fp32": ("fp32", False, torch.float32)}


def precision_of(dtype: torch.dtype) -> str:
    """`tl.dot` precision, also the kernels' fp32 switch: "tf32x3" (three TF32 tensor-core products, about fp32
    accuracy) for fp32 inputs, "tf32" otherwise (16-bit operands ignore it; fp32 operands of 16-bit runs get TF32)."""
    return "tf32x3" if dtype == torch.float32 else "tf32"


class BwdPrecision(NamedTuple):
    """`tl.dot` precisions of the backward's products."""
    products: str      # the state, WY and CP-map backward
    intra: str         # the chunk-local backward's intra-chunk sums (Rq, RL, C)
    intra_state: str   # the chunk-local backward's state-side products (do S^T, v_new dS^T, dvb S^T)


def bwd_precision_of(dtype: torch.dtype) -> BwdPrecision:
    """fp32 inputs: tf32x3 everywhere. bf16: TF32 (the operands are bf16). fp16: TF32, except the chunk-local
    backward's intra-chunk sums, whose fp32 operands (anchored factors, dAqk, dL) rounded to TF32 cost the gate
    gradients an order of magnitude (H100, fla's masked fp16 varlen case, 2 seeds: ddt_bias 1.0e-2 / 2.0e-2 with TF32
    there, 7.1e-4 / 6.3e-4 with tf32x3 there; tf32x3 in the state-side, state or WY products instead does not
    help)."""
    if dtype == torch.float32:
        return BwdPrecision("tf32x3", "tf32x3", "tf32x3")
    if dtype == torch.float16:
        return BwdPrecision("tf32", "tf32x3", "tf32")
    return BwdPrecision("tf32", "tf32", "tf32")


def compile_specs(arch: int) -> list[CompileSpec]:
    """Every (kernel, launch configuration) the dispatcher can pick on `arch`, for ahead-of-time compilation (the
    FMHA family's too)."""
    from triton_kda.fmha.configs import fmha_compile_specs
    from triton_kda.intra import (
        _kda_gate_bwd_kernel,
        _kda_gate_cumsum_fwd_kernel,
        _kda_intra_bwd_kernel,
        _kda_intra_fwd_kernel,
        _kda_qk_bwd_kernel,
        _kda_wy_bwd_kernel,
        _kda_wy_fwd_kernel,
    )
    from triton_kda.state import _kda_state_bwd_kernel, _kda_state_fwd_kernel

    specs = []
    for K, V in ((64, 64), (128, 128), (256, 256)):
        for dname, (ty, is_bf16, dtype) in _DTYPES.items():
            prec, bp = precision_of(dtype), bwd_precision_of(dtype)
            bprec = bp.products
            for BT in (32, 64):
                ic = intra_config(arch, K, V)
                sig = {n: "*fp32" for n in ("gl", "rstd_q", "rstd_k", "beta_act")}
                sig.update({n: f"*{ty}" for n in ("q", "k", "v", "g", "beta", "w", "u", "qg", "kg")})
                sig["Aqk"] = sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"A_log": "*fp32", "dt_bias": "*fp32", "cu_seqlens": "*i64", "chunk_indices": "*i32",
                            "scale": "fp32", "lower_bound": "fp32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BC=ic.BC, BK=ic.BK, BV=ic.BV, USE_L2NORM=True, GATE=2,
                          HAS_A_LOG=True, HAS_DT_BIAS=True, BETA_SIGMOID=True, BETA_SCALE=1.0, STORE_AUX=True,
                          IS_BF16=is_bf16, PREC=prec, EXACT_ROWS=True)
                specs.append(CompileSpec(f"intra_fwd K{K} V{V} BT{BT} {dname}", _kda_intra_fwd_kernel, sig, ce,
                                         ic.num_warps, ic.num_stages))
                fc = wy_fwd_config(arch, K, V)
                sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "w", "u", "qg", "kg")}
                sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "rstd_q", "rstd_k", "beta_act", "gl")})
                sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "scale": "fp32", "lower_bound": "fp32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BK=fc.BK, BV=fc.BV, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True,
                          IS_BF16=is_bf16, PREC=prec)
                specs.append(CompileSpec(f"wy_fwd K{K} V{V} BT{BT} {dname}", _kda_wy_fwd_kernel, sig, ce,
                                         fc.num_warps, fc.num_stages))
                sc = state_config(arch, K, V, 4 if dname == "fp32" else 2)
                sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "u", "o", "v_new", "h")}
                sig.update({n: "*fp32" for n in ("gl", "h0", "ht")})
                sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_offsets": "*i64"})
                ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=sc.BV, HAS_H0=True, STORE_HT=True, STORE_H=True,
                          STORE_VNEW=True, V_FIRST=False, IS_BF16=is_bf16, PREC=prec)
                specs.append(CompileSpec(f"state_fwd K{K} V{V} BT{BT} {dname}", _kda_state_fwd_kernel, sig, ce,
                                         sc.num_warps, sc.num_stages))
                sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "do")}
                sig.update({n: "*fp32" for n in ("gl", "dht", "dv_new", "dh0")})
                sig["dh"] = "*bf16" if is_bf16 else "*fp32"  # grad_state_dtype
                sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_offsets": "*i64"})
                ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BV=sc.BV, HAS_DHT=True, STORE_DH0=True,
                          V_FIRST=False, IS_BF16=is_bf16, PREC=bprec)
                specs.append(CompileSpec(f"state_bwd K{K} V{V} BT{BT} {dname}", _kda_state_bwd_kernel, sig, ce,
                                         sc.num_warps, sc.num_stages))
                wc = wy_bwd_config(arch, K, V)
                sig = {n: f"*{ty}" for n in ("k", "v", "v_new", "do", "dv")}
                sig.update({n: "*fp32" for n in ("Gc", "rstd_k", "beta_act", "h", "dv_new", "dvb", "dAqk", "dL",
                                                 "dbeta_v")})
                sig["Akk"] = f"*{ty}" if is_bf16 else "*fp32"
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BK=wc.BK, BV=wc.BV, V_FIRST=False,
                          VIA_STATE=dtype == torch.float32, PREC=bprec)
                specs.append(CompileSpec(f"wy_bwd K{K} V{V} BT{BT} {dname}", _kda_wy_bwd_kernel, sig, ce,
                                         wc.num_warps, wc.num_stages))
                bc = intra_bwd_config(arch, K, V)
                sig = {n: f"*{ty}" for n in ("q", "k", "v_new", "do")}
                sig.update({n: "*fp32" for n in ("Gc", "gl", "rstd_q", "rstd_k", "beta_act", "dvb", "dAqk", "dL",
                                                 "dq", "dk", "dE", "dF", "dbeta_k")})
                sig["h"] = sig["dh"] = "*bf16" if is_bf16 else "*fp32"  # grad_state_dtype
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "scale": "fp32", "TT": "i32"})
                ce = dict(H=4, HV=8, K=K, V=V, BT=BT, BC=bc.BC, BK=bc.BK, BV=bc.BV, V_FIRST=False, PREC=bp.intra,
                          PREC_S=bp.intra_state)
                specs.append(CompileSpec(f"intra_bwd K{K} V{V} BT{BT} {dname}", _kda_intra_bwd_kernel, sig, ce,
                                         bc.num_warps, bc.num_stages))
                gc = gate_bwd_config(arch, K)
                sig = {"g": f"*{ty}", "dg": f"*{ty}"}
                sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "dE", "dF", "dA_log_part",
                                                 "ddt_bias_part")})
                sig.update({"cu_seqlens": "*i64", "chunk_indices": "*i32", "lower_bound": "fp32", "NT": "i32"})
                ce = dict(HV=8, K=K, BT=BT, BK=gc.BK, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True)
                specs.append(CompileSpec(f"gate_bwd K{K} BT{BT} {dname}", _kda_gate_bwd_kernel, sig, ce,
                                         gc.num_warps, 1))
                sig = {"g": f"*{ty}", "A_log": "*fp32", "dt_bias": "*fp32", "Gc": "*fp32", "cu_seqlens": "*i64",
                       "chunk_indices": "*i32", "lower_bound": "fp32"}
                ce = dict(HV=8, K=K, BT=BT, BK=gc.BK, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True, PREC=prec)
                specs.append(CompileSpec(f"gate_cumsum K{K} BT{BT} {dname}", _kda_gate_cumsum_fwd_kernel, sig, ce,
                                         gc.num_warps, 1))
                specs += _cp_specs(arch, K, V, BT, dname, ty, is_bf16, prec, bprec)
            sig = {"x": f"*{ty}", "dx_part": "*fp32", "dx": f"*{ty}", "TT": "i32"}
            ce = dict(H=4, G=2, K=K, BT=32, BK=_kpad(K, arch), USE_L2NORM=True)
            specs.append(CompileSpec(f"qk_bwd K{K} {dname}", _kda_qk_bwd_kernel, sig, ce, 4, 1))
            specs += _recurrent_specs(arch, K, V, dname, ty)
    return specs + _pool_specs(arch) + fmha_compile_specs(arch)


def _recurrent_specs(arch: int, K: int, V: int, dname: str, ty: str) -> list[CompileSpec]:
    """The fused_recurrent_kda kernels (recurrent.py) of one (K, V, dtype): the forward with each V block the table
    picks (a small and a large batch), in its serving form (pool, per-token indices, accepted counts, in place), the
    reverse pass and the input-gradient kernel."""
    from triton_kda.recurrent import (
        _kda_recurrent_bwd_kernel,
        _kda_recurrent_fwd_kernel,
        _kda_recurrent_input_bwd_kernel,
    )

    BK = _kpad(K, arch)
    flags = dict(H=4, HV=8, K=K, V=V, BK=BK, USE_L2NORM=True, GATE=2, HAS_A_LOG=True, HAS_DT_BIAS=True,
                 BETA_SIGMOID=True, BETA_SCALE=1.0)
    tables = {"cu_seqlens": "*i64", "indices": "*i32", "num_accepted": "*i32"}
    ints = {n: "i32" for n in ("T", "TT", "stride_h0", "s_in", "s_it", "S_cols", "num_slots")}
    specs = []
    for heads in (1, 1 << 20):
        cfg = recurrent_fwd_config(arch, K, V, heads, 132)
        sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "beta")}
        sig.update({"A_log": "*fp32", "dt_bias": "*fp32", "h0": "*fp32", "o": f"*{ty}", "ht": "*fp32", **tables,
                    "scale": "fp32", "lower_bound": "fp32", **ints})
        ce = dict(flags, BV=cfg.BV, NV=triton.cdiv(V, cfg.BV), HAS_H0=True, STORE_HT=False, INPLACE=True,
                  IS_VARLEN=True, IDX_MODE=2, HAS_ACCEPTED=True, V_FIRST=False)
        spec = CompileSpec(f"recurrent_fwd K{K} V{V} BV{cfg.BV} {dname}", _kda_recurrent_fwd_kernel, sig, ce,
                           cfg.num_warps, 1)
        if spec not in specs:
            specs.append(spec)
    bc = recurrent_bwd_config(arch, K, V)
    NV = triton.cdiv(V, bc.BV)
    sig = {n: f"*{ty}" for n in ("q", "k", "v", "g", "beta")}
    sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "h0")})
    sig.update({"do": f"*{ty}", "dht": "*fp32", "dh0": "*fp32", "ckpt": "*fp32", "ck_offsets": "*i64", "dv": f"*{ty}"})
    sig.update({n: "*fp32" for n in ("dq_p", "dk_p", "dg_p", "db_p")})
    sig.update({**tables, "scale": "fp32", "lower_bound": "fp32", **ints, "stride_dh0": "i32"})
    sig = {n: sig[n] for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "do", "dht", "dh0", "ckpt",
                               "ck_offsets", "dv", "dq_p", "dk_p", "dg_p", "db_p", "cu_seqlens", "indices",
                               "num_accepted", "scale", "lower_bound", "T", "TT", "stride_h0", "stride_dh0", "s_in",
                               "s_it", "S_cols", "num_slots")}
    ce = dict(flags, BV=bc.BV, NV=NV, C=bc.C, HAS_H0=True, HAS_DHT=True, STORE_DH0=True, IS_VARLEN=True, IDX_MODE=0,
              HAS_ACCEPTED=False, V_FIRST=False)
    specs.append(CompileSpec(f"recurrent_bwd K{K} V{V} {dname}", _kda_recurrent_bwd_kernel, sig, ce, bc.num_warps, 1))
    sig = {n: f"*{ty}" for n in ("q", "k", "g", "beta")}
    sig.update({n: "*fp32" for n in ("A_log", "dt_bias", "dq_p", "dk_p", "dg_p", "db_p")})
    sig.update({"dq": f"*{ty}", "dk": f"*{ty}", "dg": "*fp32", "dbeta": f"*{ty}", "dA_p": "*fp32", "scale": "fp32",
                "lower_bound": "fp32", "TT": "i32"})
    ce = dict({n: v for n, v in flags.items() if n != "V"}, G=2, NV=NV)
    specs.append(CompileSpec(f"recurrent_input_bwd K{K} {dname}", _kda_recurrent_input_bwd_kernel, sig, ce,
                             bc.input_warps, 1))
    return specs


def _pool_specs(arch: int) -> list[CompileSpec]:
    """The state-pool gather and scatter of chunk_kda (pool.py), at K = V = 128 with 8 v-heads."""
    from triton_kda.pool import _kda_pool_gather_fwd_kernel, _kda_pool_scatter_fwd_kernel

    BLOCK, num_warps = pool_copy_config(arch)
    specs = []
    for name, fn, src, dst in (("pool_gather", _kda_pool_gather_fwd_kernel, "pool", "h0"),
                               ("pool_scatter", _kda_pool_scatter_fwd_kernel, "ht", "pool")):
        sig = {src: "*fp32", "indices": "*i32", dst: "*fp32", "stride_pool": "i32", "num_slots": "i32"}
        specs.append(CompileSpec(name, fn, sig, dict(KV=8 * 128 * 128, BLOCK=BLOCK), num_warps, 1))
    return specs


def _cp_specs(arch: int, K: int, V: int, BT: int, dname: str, ty: str, is_bf16: bool, prec: str,
              bprec: str) -> list[CompileSpec]:
    """The four intra-card CP kernels (state_cp.py) of one (K, V, BT, dtype); the chain kernels once, at BT 64.
    prec / bprec: the forward's / backward's product precision."""
    from triton_kda.state_cp import (
        _kda_state_cp_bwd_chain_kernel,
        _kda_state_cp_bwd_map_kernel,
        _kda_state_cp_fwd_chain_kernel,
        _kda_state_cp_fwd_map_kernel,
    )

    cc = cp_config(arch, K, V, 4 if dname == "fp32" else 2)
    tables = {n: "*i64" for n in ("cu_seqlens", "chunk_offsets", "seq_pieces")}
    tables.update({"piece_seq": "*i32", "map_pieces": "*i32"})
    ce = dict(HV=8, K=K, V=V, BT=BT, BK=_kpad(K, arch), BC=cc.BC, NKB=triton.cdiv(K, cc.BC), V_FIRST=False,
              IS_BF16=is_bf16, PREC=prec)
    sig = {n: f"*{ty}" for n in ("kg", "w", "u")}
    sig.update({n: "*fp32" for n in ("gl", "h0", "maps")}, **tables)
    specs = [CompileSpec(f"cp_fwd_map K{K} V{V} BT{BT} {dname}", _kda_state_cp_fwd_map_kernel, sig,
                         dict(ce, HAS_H0=True), cc.num_warps, cc.num_stages)]
    sig = {n: f"*{ty}" for n in ("qg", "kg", "w", "Aqk", "do")}
    sig["Aqk"] = f"*{ty}" if is_bf16 else "*fp32"
    sig.update({n: "*fp32" for n in ("gl", "dht", "maps")}, **tables)
    specs.append(CompileSpec(f"cp_bwd_map K{K} V{V} BT{BT} {dname}", _kda_state_cp_bwd_map_kernel, sig,
                             dict(ce, HAS_DHT=True, PREC=bprec), cc.num_warps, cc.num_stages))
    if BT == 64:
        ce = dict(HV=8, K=K, V=V, BK=_kpad(K, arch), BV=cc.chain_BV, BKC=cc.chain_BKC, V_FIRST=False)
        for name, fn, state in (("cp_fwd_chain", _kda_state_cp_fwd_chain_kernel, ("h0", "init", "HAS_H0")),
                                ("cp_bwd_chain", _kda_state_cp_bwd_chain_kernel, ("dht", "dend", "HAS_DHT"))):
            sig = {"maps": "*fp32", state[0]: "*fp32", state[1]: "*fp32", "seq_pieces": "*i64"}
            specs.append(CompileSpec(f"{name} K{K} V{V} {dname}", fn, sig, dict(ce, **{state[2]: True}),
                                     cc.chain_warps, 1))
    return specs
