"""Launch configurations, one small table per architecture; read lazily per device, never at import. The lookups are
pure functions of their ints, cached per argument tuple (a training step makes about 50 of them: tens of
microseconds of host time, `python -m benchmarks.host_time`).

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
    fwd_warps: int     # warps of the forward map kernel
    fwd_stages: int    # ... and pipeline stages of its chunk loop
    bwd_warps: int     # the same of the reverse map kernel
    bwd_stages: int
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


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of host ints. `triton.cdiv` is a constexpr function, a few microseconds per host call on triton 3.6:
    with `triton.next_power_of_2` about 0.3 ms of a training step's host time (`python -m benchmarks.host_time`)."""
    return -(-a // b)


def pow2_ceil(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1), of a host int; `triton.next_power_of_2` without its cost."""
    return 1 << max(0, (n - 1).bit_length())


@functools.cache
def _kpad(K: int, arch: int) -> int:
    """Tile width covering a head dim of K: a power of two, at least 16 in the interpreter and 32 on GPUs (16-wide
    K or V tiles gave illegal addresses and wrong outputs in bf16/fp16 products on sm_90, triton 3.6,
    docs/benchmarks/NOTES.md at a24d737)."""
    return max(16 if arch == 0 else 32, pow2_ceil(K))


@functools.cache
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


@functools.cache
def wy_fwd_config(arch: int, K: int, V: int) -> IntraConfig:
    """The backward's WY recompute: the intra forward's tiles (its products must round as the forward's) and 3
    pipeline stages (Triton's default, with which it was measured: 0.46-0.49 ms at B2 T8192 H32 on an H200)."""
    return replace(intra_config(arch, K, V), num_stages=3)


@functools.cache
def wy_bwd_config(arch: int, K: int, V: int) -> IntraConfig:
    """The WY backward (one program per chunk and v-head, V slices of BV; with fp32 inputs K slices of BK inside)."""
    return IntraConfig(BC=16, BK=min(64, _kpad(K, arch)), BV=min(32 if arch == 0 else 64, _kpad(V, arch)), num_warps=4,
                       num_stages=1)


@functools.cache
def intra_bwd_config(arch: int, K: int, V: int, span: bool = False, split: bool = False) -> IntraConfig:
    """The chunk-local backward (one program per BC-row block of a chunk, v-head and K slice of BK); span: the kernel
    of the spanning gate form (`_kda_intra_bwd_span_kernel`, fp32 and fp16 inputs: tf32x3 intra-chunk sums); split:
    its state-side products are `_jit._dot_f16x3` (fp32 inputs), whose fp16 operands at K > 128 need 108544 B of
    shared memory with three stages, over the 101376 B of sm_86 / sm_89 / sm_120: two stages there."""
    if arch == 0:
        return IntraConfig(BC=16, BK=min(32, _kpad(K, arch)), BV=min(32, _kpad(V, arch)), num_warps=4, num_stages=1)
    # H100 B2 T8192 H32 K128 bf16 (docs/benchmarks/NOTES.md at a24d737): BK 64 / BV 64 / 4 warps / 2 stages 4.13 ms;
    # 1 stage 5.09, BV 32 5.89, BV 128 5.99, BK 128 / 8 warps 6.34, BK 32 / 2 stages 6.56, BK 32 / 8 warps 15.4.
    # 3 stages (2026-11-25, fwd+bwd against 2 stages, docs/benchmarks/runs/2026-11-25_bwd_stages): fp16 x0.963,
    # K = V = 256 bf16 x0.97, B1 T8192 H16 bf16 x0.96-0.99, fp32 x0.99, B2 T8192 H32 bf16 x0.997; 8 warps at BK 64
    # x1.15-1.32.
    # The spanning form at K <= 128 takes 32-wide V blocks (H100 fwd+bwd, docs/benchmarks/runs/2026-11-26_k256_bwd):
    # fp32 B1 T8192 H16 7.840 -> 7.373 ms (BK 32 7.806, 2 stages 7.898, 8 warps 8.004), B2 T8192 H32 26.025 ->
    # 24.100; fp16 B1 T8192 H16 4.409 -> 4.325, B2 T8192 H32 12.613 -> 12.265
    BV = 32 if span and K <= 128 else 64
    stages = 2 if split and K > 128 and arch in (86, 89, 120) else 3
    return IntraConfig(BC=16, BK=min(64, _kpad(K, arch)), BV=min(BV, _kpad(V, arch)), num_warps=4, num_stages=stages)


def intra_bwd_candidates(arch: int, K: int, V: int) -> list[IntraConfig]:
    """Alternatives to `intra_bwd_config` for TRITON_KDA_AUTOTUNE: the configurations of the H100 sweep
    (docs/benchmarks/NOTES.md at a24d737)."""
    kp, vp = _kpad(K, arch), _kpad(V, arch)
    return [IntraConfig(BC=16, BK=min(bk, kp), BV=min(bv, vp), num_warps=w, num_stages=s)
            for bk, bv, w, s in ((64, 64, 4, 2), (64, 128, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (128, 64, 8, 1))]


class GateBwdConfig(NamedTuple):
    BK: int        # K slice width
    num_warps: int


@functools.cache
def gate_bwd_config(arch: int, K: int) -> GateBwdConfig:
    """The gate backward (one program per chunk, v-head and K slice: a reverse cumsum and elementwise work)."""
    return GateBwdConfig(BK=min(32 if arch == 0 else 64, _kpad(K, arch)), num_warps=4)


@functools.cache
def gate_cumsum_config(arch: int, K: int, pair: bool) -> GateBwdConfig:
    """The gate cumsum (one program per chunk, v-head and K slice): the gate backward's slices, but at most 32 wide
    where it writes an fp32 pair from an fp64 scan (`gate.gate_cumsum_pair`). H200, B2 T8192 H32 Kimi flags, CUDA time
    per step (docs/benchmarks/runs/2026-11-28_fp32_configs): fp32 242 us at BK 32 / 4 warps against 420 at BK 64
    (64 / 8 warps 287, 128 / 4 318); fp16 127 us at BK 64 against 145 at BK 32."""
    cfg = gate_bwd_config(arch, K)
    return cfg._replace(BK=min(cfg.BK, 32)) if pair else cfg


@functools.cache
def state_config(arch: int, K: int, V: int, elem_size: int, narrow: bool = False,
                 pair_bwd: bool = False) -> StateConfig:
    """elem_size: bytes per element of the stored intermediates (2 for bf16/fp16, 4 for fp32); narrow: the launch
    has too few rows to fill the GPU with 64-wide V blocks (`state_narrow`), so they are halved (fp32: 32 -> 16).
    16-bit inputs keep blocks at least 32 wide (`_kpad`); fp32's 16-wide ones reach fp16 operands only as the
    16-column sides of the state backward's split products (`_jit._dot_f16x3`), checked on the H100 over the fp32
    kda-check grid and the fp32 GPU tests (docs/benchmarks/runs/2026-11-26_f16x3). pair_bwd: the state backward on
    fp16 pairs (`wy.IntraOut`), six [BT, K] fp16 tiles per chunk: one pipeline stage (two need 237568 B of shared
    memory on sm_90 at K = 128, over its 232448)."""
    BK = _kpad(K, arch)
    if arch == 0:
        return StateConfig(BV=min(32, _kpad(V, arch)), num_warps=4, num_stages=1)
    if elem_size == 2:
        BV = 64 if BK <= 128 and not narrow else 32
    else:
        BV = 16 if BK > 128 or narrow else 32
    # double-buffer the chunk loads only for rows of <= 256 bytes: triton 3.6 pipelines the chunk loop deeper than
    # 3.7 and ran out of shared memory on sm90 at bf16 BK = 256 with two stages (237568 B > 232448 B)
    # H100 bf16 K128 (docs/benchmarks/NOTES.md at a24d737): 3 stages 0.35 ms, 2 stages 0.43 ms
    stages = 3 if elem_size == 2 and BK <= 128 else 2 if elem_size * BK <= 256 else 1
    if elem_size == 4 and BK <= 128 and BV == 16 and arch in (90, 100):
        # fp32 rows of 512 bytes fit two stages in the 227 KiB of sm_90 / sm_100 with 16-wide V blocks. H100, B1
        # T8192 H16 fp32 fwd+bwd (64 programs at 32 wide; docs/benchmarks/runs/2026-11-26_k256_bwd): 32 wide 8.939
        # ms, 16 wide 8.149, 16 wide with two stages 7.847; 8 warps 9.215, 16 wide with 2 warps 62.8
        stages = 2
    if pair_bwd:
        stages = 1
    return StateConfig(BV=min(BV, _kpad(V, arch)), num_warps=4, num_stages=stages)


def state_narrow(rows: int, V: int, device: torch.device) -> bool:
    """Whether a state launch over `rows` (sequences or CP pieces, times v-heads) takes half-wide V blocks (16-bit: 32
    instead of 64; fp32: 16 instead of 32): with 64-wide ones its rows x V / 64 programs would fill at most half the
    SMs of `device`, and each program's chunk loop is latency-bound. H200 (132 SMs), bf16 fwd+bwd, 32- against
    64-wide (docs/benchmarks/runs/2026-11-26_state_blocks): x0.82 at B1 T8192 H16 (32 programs), x0.94-0.96 at B1
    H32 (64), x1.08 slower at B2 H32 (128)."""
    return 2 * rows * cdiv(V, 64) <= sm_count(device)


def state_candidates(arch: int, K: int, V: int, elem_size: int) -> list[StateConfig]:
    """Alternatives to `state_config` for TRITON_KDA_AUTOTUNE: narrower V blocks and fewer pipeline stages (never
    more than the table's, which are bounded by shared memory)."""
    base = state_config(arch, K, V, elem_size)
    widths = [base.BV] + ([base.BV // 2] if base.BV // 2 >= 32 else [])
    return [StateConfig(BV=bv, num_warps=4, num_stages=s) for bv in widths for s in range(1, base.num_stages + 1)]


@functools.cache
def cp_config(arch: int, K: int, V: int, elem_size: int, bf16: bool = False, BT: int = 64) -> CPConfig:
    """Launch configuration of the intra-card CP kernels (state_cp.py); elem_size as in `state_config`, bf16: the
    inputs are bf16 (fp16's reverse map takes fp32 Aqk and TF32 products), BT: the chunk size. The map kernels carry
    a [K, BC] fp32 block, like the serial kernel's [K, BV]; the chain kernels a [K, chain_BV] state and
    [K, chain_BKC] slices of a map. A map launch with more than one stage runs the kernel's prefetching body
    (`PREFETCH`), only where it was checked on a GPU."""
    BK = _kpad(K, arch)
    if arch == 0:
        return CPConfig(BC=min(32, _kpad(max(K, V), arch)), fwd_warps=4, fwd_stages=1, bwd_warps=4, bwd_stages=1,
                        chain_BV=16, chain_BKC=16, chain_warps=4)
    BC = 64 if elem_size == 2 and BK <= 128 else 32 if elem_size == 2 or BK <= 128 else 16
    # sm_90 ptxas, K = V = 128 bf16 BT 64, one stage: the map kernels spill 456-660 B at 4 warps, 0-12 B at 8; the
    # chain kernels spill at 4 warps or with [256, 32] states, not at 8 warps with the blocks below
    cfg = CPConfig(BC=BC, fwd_warps=8, fwd_stages=1, bwd_warps=8, bwd_stages=1, chain_BV=32 if BK <= 128 else 16,
                   chain_BKC=32, chain_warps=8)
    if arch == 90 and elem_size == 2 and BK == 128 and BT == 64:
        # H200, B1 H32 K = V = 128, 131072 tokens of one sequence (docs/benchmarks/runs/2026-11-27_cp_maps), the
        # prefetching body against one stage and 8 warps: the forward map x1.5-1.7 in pieces of 128-512 chunks at 4
        # warps and 2 stages (two programs per SM), bf16 and fp16; bf16's reverse map x3.3 at 4 warps and 3 stages
        # (4 need 280064 B of shared memory), fp16's x0.7 (fp32 Aqk, TF32 products). The prefetching body gave wrong
        # maps or faulted with 32-wide column blocks (triton 3.6), so other blocks and chunk sizes keep one stage
        cfg = replace(cfg, fwd_warps=4, fwd_stages=2)
        if bf16:
            cfg = replace(cfg, bwd_warps=4, bwd_stages=3)
    return cfg


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


@functools.cache
def recurrent_fwd_config(arch: int, K: int, V: int, heads: int, sms: int) -> RecurrentConfig:
    """The decode / token-recurrence forward (recurrent.py): one program per (sequence, v-head, V block) reads and
    writes each state element once, so the launch is memory-bound; ``heads`` = N * HV, ``sms`` the GPU's SM count.
    The widest V block (64, 32, 16) that still gives at least two programs per SM: wide blocks for large batches,
    more programs in flight for small ones. H100 (2026-11-24, `benchmarks/decode_check.py`'s sweep, HV 32,
    K = V = 128, two runs): BV 64 with 4 warps 382.3 / 382.7 us at B256 in CUDA graphs against 411.2 / 411.9 for
    BV 32 (1.07x the state traffic floor), and 98.4 / 110.6 us against 105.0 / 113.2 at B64; B1 takes BV 16
    (3.7 us)."""
    if arch == 0:
        return RecurrentConfig(BV=min(16, pow2_ceil(V)), num_warps=4)
    BK = _kpad(K, arch)
    BV = next((bv for bv in (64, 32) if heads * cdiv(V, bv) >= 2 * sms), 16)
    return RecurrentConfig(BV=min(BV, pow2_ceil(V)), num_warps=4 if BK <= 128 else 8)


def recurrent_fwd_candidates(arch: int, K: int, V: int) -> list[RecurrentConfig]:
    """Alternatives to `recurrent_fwd_config` that `benchmarks/decode_check.py` times (not TRITON_KDA_AUTOTUNE:
    timing a launch that updates a state pool in place would apply the update once per trial)."""
    vp = pow2_ceil(V)
    pairs = ((8, 1), (16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (32, 8), (64, 4), (64, 8), (128, 8))
    return [RecurrentConfig(BV=bv, num_warps=w) for bv, w in pairs if bv <= vp]


@functools.cache
def recurrent_bwd_config(arch: int, K: int, V: int) -> RecurrentBwdConfig:
    """The reverse pass of fused_recurrent_kda's backward: state, its gradient and three temporaries of [K, BV]
    fp32 live at once, hence narrow V blocks. C = 8 replays 3.5 steps per token on average and keeps one
    checkpoint per 8 tokens; the interpreter uses C = 4 so that small tests cross several checkpoints."""
    if arch == 0:
        return RecurrentBwdConfig(BV=min(16, pow2_ceil(V)), C=4, num_warps=4, input_warps=4)
    BK = _kpad(K, arch)
    # sm_90 ptxas (triton 3.7): 213 registers at K = 128 and 4 warps, 210 at K = 256 and 8 warps, no spills
    return RecurrentBwdConfig(BV=min(16, pow2_ceil(V)), C=8, num_warps=4 if BK <= 128 else 8,
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


def fp32_pairs(arch: int, K: int) -> bool:
    """Whether fp32 runs hand w, qg and kg to the state passes as fp16 pairs (`wy.IntraOut`): where tiles of K are
    at least 64 wide on GPUs (the state backward's pair products faulted with an illegal address at K = 32 on sm_90,
    triton 3.6; K = 64, 128 and 256 pass the fp32 kda-check grid there), and at every K in the interpreter, whose
    tests run at small K. H100 fwd+bwd fp32 against the code before, c3b4415 with kept states
    (docs/benchmarks/runs/2026-11-26_fp32_pairs): B1 T8192 H16 x0.932, B2 T8192 H32 x0.921, B1 T32768 H8 x0.886,
    B1 T8192 H16 K = V = 256 x0.616."""
    return arch == 0 or K > 32  # tiles of K (`_kpad`) >= 64; K may be a SymInt (the op's fake)


def precision_of(dtype: torch.dtype) -> str:
    """`tl.dot` precision (`_jit._dot`), also the kernels' fp32 switch: "tf32x3" (three TF32 tensor-core products,
    about fp32 accuracy) for fp32 inputs; for fp16, "tf32rn" (fp32 operands rounded to the nearest TF32 value: the
    hardware truncates, a one-sided error that does not average out in sums); for bf16, "tf32" (bf16 operands ignore
    it, the few fp32 ones meet bf16-rounded data)."""
    if dtype == torch.float32:
        return "tf32x3"
    return "tf32rn" if dtype == torch.float16 else "tf32"


class BwdPrecision(NamedTuple):
    """`tl.dot` precisions of the backward's products."""
    products: str      # the state and WY backward (the CP maps' backward takes `precision_of`)
    intra: str         # the chunk-local backward's intra-chunk sums (Rq, RL, C)
    intra_state: str   # the chunk-local backward's state-side products (do S^T, v_new dS^T, dvb S^T)
    gate_span: bool    # the gate gradient's spanning form (`_kda_intra_bwd_span_kernel`), else the E-form


def bwd_precision_of(dtype: torch.dtype, gate: int = 0) -> BwdPrecision:
    """fp32 inputs: the state, WY and chunk-local state-side products split in three fp16 products (`_jit._dot_f16x3`,
    half tf32x3's tensor-core time; H100 B1 T8192 H16 fwd+bwd 7.345 -> 6.864 ms, every fp32 kda-check row's error
    within 1.3x of tf32x3's, docs/benchmarks/runs/2026-11-26_f16x3), tf32x3 in the intra-chunk sums, whose
    gate-anchored rows span more than fp16's exponent range (through the interpreter, strong decays: relative RMSE up
    to 0.5 with the split there). bf16: TF32 (the operands are bf16). fp16: TF32, except the chunk-local
    backward's intra-chunk sums, whose fp32 operands (anchored factors, dAqk, dL) rounded to TF32 cost the gate
    gradients an order of magnitude (H100, fla's masked fp16 varlen case, 2 seeds: ddt_bias 1.0e-2 / 2.0e-2 with TF32
    there, 7.1e-4 / 6.3e-4 with tf32x3 there; tf32x3 in the state-side, state or WY products instead does not
    help). The gate gradient's spanning form for fp32 and fp16 (fp32 kda-check row B1 T40 l2norm + gate in kernel:
    dA_log 2.9e-5 -> 2.5e-6 through the interpreter; H100 B2 T8192 H32 fwd+bwd fp16 x0.98, fp32 x1.01); bf16 keeps
    the E-form, whose kernel is faster and whose gate error the form does not move
    (docs/benchmarks/NOTES.md at a24d737). bf16's intra-chunk sums split their B operands (the anchored factors times
    qn, kn) in two TF32 products: the gate gradient's cancelling sums amplify their rounding, not the A side's (dAqk,
    dL). H100, pre-gated bf16 B1 T256 H16 without a state, 8 seeds: dg 4.07e-3 with TF32, 2.92e-3 split (tf32x3 there:
    2.92e-3), fla 3.78e-3
    (docs/benchmarks/runs/2026-11-26_split_products); the interpreter, fp16 inputs on this form: dg 2.7e-3 with
    rounded TF32, 4.4e-4 split, 3.8e-4 in fp32. The lower-bound gate (`gate` 2, Kimi's: per-token log-decays >= -5)
    splits only the B operands of each block's own 16 tokens ("tf32blocksplit"), as the compiled kernel
    (cuda_fast/csrc/kda_intra_bwd.cu) does: it kept single products until 2026-11-27, when its unsaturated regime
    (A_log near 0) lost dg and ddt_bias to fla (H200, 4 seeds: ddt_bias 1.13e-2 against fla's 5.99e-3, 3.03e-3 with
    the block split; interpreter, fp16 inputs on this form, T128 H2 K=V=64, 3 seeds: dg 2.1e-3 rounded, 3.7e-4 block
    split, 3.6e-4 split and in fp32), and every pair split cost the compiled kernel fwd+bwd x1.033 on an H200 at B2
    T8192 H32 (the block split x1.015; docs/benchmarks/runs/2026-11-27_gate_regimes, `unsaturated_interp.py` there)."""
    if dtype == torch.float32:
        return BwdPrecision("f16x3", "tf32x3", "f16x3", True)
    if dtype == torch.float16:
        return BwdPrecision("tf32rn", "tf32x3", "tf32rn", True)
    return BwdPrecision("tf32", "tf32blocksplit" if gate == 2 else "tf32split", "tf32", False)
