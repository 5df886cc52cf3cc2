"""Triton device helpers shared by the stage kernels (intra, gate, WY, state, state CP, recurrent): chunk coordinates of
a program, 16-bit operand casts, tensor-core products with rounded TF32 operands or split fp16 ones, fp16-pair tensors
(fp32 w, qg, kg stored as hi and lo fp16 planes with a power-of-two factor per row, `wy.IntraOut`), state offsets in
either layout, and a finite-or-zero guard."""
import triton
import triton.language as tl

from triton_kda.configs import is_interpreter

LOG2E = tl.constexpr(1.4426950408889634)
# Triton's CPU interpreter computes every tl.dot as an fp32 numpy product whatever its input_precision; "f16x3" does
# the same there (`_dot_exact`), so that one rounding model holds for every precision name under the interpreter
# (`_pair_dot` takes the product of its pairs' sums there).
_INTERPRET = tl.constexpr(is_interpreter())


@triton.jit
def _op(x, IS_BF16: tl.constexpr):
    """Operand dtype of the tensor-core products: bf16 for bf16 inputs, fp32 otherwise."""
    if IS_BF16:
        x = x.to(tl.bfloat16)
    else:
        x = x.to(tl.float32)
    return x


@triton.jit
def _rn_tf32(x):
    """fp32 x rounded to the nearest TF32 value (10 mantissa bits, ties away from zero). A TF32 product reads only
    the top 10 mantissa bits of an fp32 operand (truncation: a one-sided error that does not average out in sums)."""
    bits = x.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _tf32_operand(x, PREC: tl.constexpr):
    """x as a product at precision PREC reads it: rounded by `_rn_tf32` under "tf32rn" (fp32 x), else unchanged.
    An operand that serves several products is rounded once and passed to `_dot_exact`; values stored in fp16 need
    no rounding."""
    if PREC == "tf32rn":
        if x.dtype == tl.float32:
            x = _rn_tf32(x)
    return x


@triton.jit
def _pow2_scale(m):
    """(2^s, 2^-s) for maxima m >= 0 (fp32), s = 14 - floor(log2 m) clamped to [-126, 126]: m 2^s in [2^14, 2^15)."""
    e = ((m.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32) - 127
    s = tl.minimum(tl.maximum(14 - e, -126), 126)
    return ((s + 127) << 23).to(tl.float32, bitcast=True), ((127 - s) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _split16_cols(b):
    """fp32 b [R, N] as fp16 (hi, lo, down [N]): each column scaled by a power of two (exact) to put its largest
    magnitude in [2^14, 2^15), hi its nearest fp16 value, lo the fp16 rounding of the rest (22 significant bits), down
    the factor that undoes the scaling. Elements below about 2^-28 of their column's largest fall into fp16 subnormals
    and keep fewer bits."""
    up, down = _pow2_scale(tl.max(tl.abs(b), axis=0))
    b = b * up[None, :]
    hi = b.to(tl.float16)
    return hi, (b - hi.to(tl.float32)).to(tl.float16), down


@triton.jit
def _pair_dot(a_hi, a_lo, b_hi, b_lo, down):
    """(a_hi + a_lo) @ (b_hi + b_lo) * down for fp16 pairs a [M, K] and b [K, N] (b and down from `_split16_cols`):
    three fp16 tensor-core products (hi lo + lo hi + hi hi, fp32 accumulation). Under the interpreter one fp32 product
    of the pairs' sums."""
    if _INTERPRET:
        out = tl.dot(a_hi.to(tl.float32) + a_lo.to(tl.float32), b_hi.to(tl.float32) + b_lo.to(tl.float32),
                     input_precision="ieee")
    else:
        out = tl.dot(a_hi, b_lo)
        out = tl.dot(a_lo, b_hi, out)
        out = tl.dot(a_hi, b_hi, out)
    return out * down[None, :]


@triton.jit
def _dot_f16x3(a, b, acc):
    """a @ b (+ acc) for fp32 a [M, K], b [K, N] from three fp16 tensor-core products (hi lo + lo hi + hi hi, fp32
    accumulation), half the tensor-core time of tf32x3 at its accuracy. Each row of a and column of b is scaled by a
    power of two (exact) to put its largest magnitude in [2^14, 2^15), then split into its nearest fp16 value hi and
    the fp16 rounding of the rest lo: 22 significant bits, as tf32x3's two TF32 parts. Elements below about 2^-28 of
    their row's (column's) largest fall into fp16 subnormals and keep fewer bits: meant for products whose rows do not
    mix such scales (the state-side products, not the gate-anchored intra-chunk sums). Its own sequence of operations
    rather than `_split16_cols` and `_pair_dot`: through those (same arithmetic) sm_90 code from triton 3.6 faulted
    with an illegal address in the fp32 state backward at K = 32 and ran the WY and chunk-local backwards 10% slower."""
    a = a.to(tl.float32)
    b = b.to(tl.float32)
    a_up, a_down = _pow2_scale(tl.max(tl.abs(a), axis=1))
    b_up, b_down = _pow2_scale(tl.max(tl.abs(b), axis=0))
    a = a * a_up[:, None]
    b = b * b_up[None, :]
    a_hi = a.to(tl.float16)
    b_hi = b.to(tl.float16)
    out = tl.dot(a_hi, (b - b_hi.to(tl.float32)).to(tl.float16))
    out = tl.dot((a - a_hi.to(tl.float32)).to(tl.float16), b_hi, out)
    out = tl.dot(a_hi, b_hi, out)
    out = out * a_down[:, None] * b_down[None, :]
    if acc is not None:
        out += acc
    return out


@triton.jit
def _pair_planes(x, bos, i_hv, T, t0, c0, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """Block pointers of the hi and lo planes of an fp16-pair tensor x ([TT, HV, K] fp32 storage whose bytes hold,
    per token and head, K fp16 hi values then K fp16 lo values; `_store_pair`) at rows t0.., columns c0.."""
    x16 = x.to(tl.pointer_type(tl.float16))
    base = x16 + (bos * HV + i_hv) * (2 * K)
    p_hi = tl.make_block_ptr(base, (T, K), (HV * 2 * K, 1), (t0, c0), (BT, BK), (1, 0))
    p_lo = tl.make_block_ptr(base + K, (T, K), (HV * 2 * K, 1), (t0, c0), (BT, BK), (1, 0))
    return p_hi, p_lo


@triton.jit
def _load_pair(x, bos, i_hv, T, t0, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """The [BT, BK] fp16 (hi, lo) tiles of pair tensor x at rows t0.. (`_pair_planes`), zero past T and K."""
    p_hi, p_lo = _pair_planes(x, bos, i_hv, T, t0, 0, HV, K, BT, BK)
    return tl.load(p_hi, boundary_check=(0, 1)), tl.load(p_lo, boundary_check=(0, 1))


@triton.jit
def _row_factors(rs, bos, i_hv, T, t0, HV: tl.constexpr, BT: tl.constexpr):
    """rs [TT, HV] fp32 (a pair tensor's row factors) at rows t0.. of the sequence starting at bos, 0 past T."""
    o_t = t0 + tl.arange(0, BT)
    return tl.load(rs + (bos + o_t) * HV + i_hv, mask=o_t < T, other=0.0)


@triton.jit
def _pair_tdot(x, b_rs, b, bos, i_hv, T, t0, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
               BK: tl.constexpr):
    """x^T @ b for pair tensor x at rows t0.. ([BT, BK] tiles, row factors b_rs [BT]) and fp32 b [BT, N]: the
    product over tokens of the state passes and CP maps, with the row factors taken into b before its split."""
    hi, lo = _load_pair(x, bos, i_hv, T, t0, HV, K, BT, BK)
    b_hi, b_lo, b_dn = _split16_cols(b * b_rs[:, None])
    return _pair_dot(tl.trans(hi), tl.trans(lo), b_hi, b_lo, b_dn)


@triton.jit
def _store_pair(x, val, bos, i_hv, T, t0, c0, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr):
    """Store fp32 val [BT, BK] (already scaled into fp16's range) as its nearest fp16 value hi and the fp16 rounding
    of the rest lo, into pair tensor x at rows t0.., columns c0.. (`_pair_planes`)."""
    p_hi, p_lo = _pair_planes(x, bos, i_hv, T, t0, c0, HV, K, BT, BK)
    hi = val.to(tl.float16)
    tl.store(p_hi, hi, boundary_check=(0, 1))
    tl.store(p_lo, (val - hi.to(tl.float32)).to(tl.float16), boundary_check=(0, 1))


@triton.jit
def _dot_exact(a, b, acc, PREC: tl.constexpr):
    """`_dot` for operands that TF32 holds exactly (`_tf32_operand`'s results, fp16 values cast to fp32)."""
    if PREC == "tf32rn":
        out = tl.dot(a, b, acc, input_precision="tf32")
    elif PREC == "f16x3":
        if _INTERPRET:
            out = tl.dot(a, b, acc, input_precision="ieee")
        else:
            out = _dot_f16x3(a, b, acc)
    else:
        out = tl.dot(a, b, acc, input_precision=PREC)
    return out


@triton.jit
def _split_operand(x, PREC: tl.constexpr):
    """An A operand that serves several products, prepared once for `_dot_split`: (hi, lo) with hi + lo = x to 22
    significant bits, both exact in TF32 (nearest, ties away from zero), under "tf32x3" on the GPU; elsewhere
    (`_tf32_operand(x)`, x), lo unused."""
    if PREC == "tf32x3" and not _INTERPRET:
        hi = _rn_tf32(x)
        lo = _rn_tf32(x - hi)
    else:
        hi = _tf32_operand(x, PREC)
        lo = x
    return hi, lo


@triton.jit
def _dot_split(a_hi, a_lo, b, acc, PREC: tl.constexpr):
    """a @ b (+ acc) for a as `_split_operand` prepared it. Under "tf32x3" on the GPU: b split as a is, then three
    TF32 products on separate accumulators, a_hi b_hi - (-a_hi b_lo - a_lo b_hi), where Triton's tf32x3 chains them
    through one (H100, fp32 B1 T8192 H16, the WY kernel's two launches per step: 588 -> 532 us; splitting a once or
    per product made no difference there; docs/benchmarks/runs/2026-11-26_fp32_pairs). NaN in the small terms (inf
    operands) is dropped, as tf32x3 does. Elsewhere `_dot_exact(a_hi, b, acc)`."""
    if PREC == "tf32x3" and not _INTERPRET:
        b = b.to(tl.float32)
        b_hi = _rn_tf32(b)
        # subtractions, not sums: Triton folds `x + dot` into the product's accumulator, which would chain them again
        neg = -tl.dot(a_hi, _rn_tf32(b - b_hi), input_precision="tf32") - tl.dot(a_lo, b_hi, input_precision="tf32")
        out = tl.dot(a_hi, b_hi, input_precision="tf32") - tl.where(neg == neg, neg, 0.0)
        if acc is not None:
            out += acc
    else:
        out = _dot_exact(a_hi, b, acc, PREC)
    return out


@triton.jit
def _tf32_rest(x):
    """What the nearest TF32 value of fp32 x leaves, itself rounded to TF32: the second half of a TF32 pair."""
    return _rn_tf32(x - _rn_tf32(x))


@triton.jit
def _dot(a, b, acc, PREC: tl.constexpr):
    """tl.dot(a, b, acc) at input precision PREC ("ieee", "tf32x3", "tf32", "tf32rn": TF32 on fp32 operands first
    rounded to the nearest TF32 value by `_rn_tf32`, "tf32split": a so rounded, fp32 b split into its nearest TF32
    value and what that leaves, two TF32 products, or "f16x3": `_dot_f16x3`). acc may be None."""
    if PREC == "tf32split":
        a_rn, b_hi = _rn_tf32(a), _rn_tf32(b)
        out = tl.dot(a_rn, b_hi, acc, input_precision="tf32")
        out = tl.dot(a_rn, _tf32_rest(b), out, input_precision="tf32")
    else:
        out = _dot_exact(_tf32_operand(a, PREC), _tf32_operand(b, PREC), acc, PREC)
    return out


@triton.jit
def _chunk_coords(cu_seqlens, chunk_indices, i_t):
    """(bos int64, sequence length int32, chunk index within the sequence int32) for chunk i_t.

    Block-pointer offsets are sequence-local (int32); the int64 part lives in the base pointer."""
    i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
    i_c = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int32)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    return bos, (eos - bos).to(tl.int32), i_c


@triton.jit
def _chunk_rows(cu_seqlens, chunk_indices, i_t, BT: tl.constexpr):
    """Chunk i_t's rows: (bos, T, t0, n_valid, o_t, m_t) with `_chunk_coords`' first two, t0 the chunk's first token
    in its sequence, n_valid its token count, o_t = arange(BT) and m_t = o_t < n_valid."""
    bos, T, i_c = _chunk_coords(cu_seqlens, chunk_indices, i_t)
    t0 = i_c * BT
    n_valid = tl.minimum(T - t0, BT)
    o_t = tl.arange(0, BT)
    return bos, T, t0, n_valid, o_t, o_t < n_valid


@triton.jit
def _state_offsets(o_k, o_v, K: tl.constexpr, V: tl.constexpr, V_FIRST: tl.constexpr):
    """Element offsets of the [len(o_k), len(o_v)] block (rows o_k, columns o_v) of one [K, V] state, stored
    [V, K] if V_FIRST."""
    if V_FIRST:
        off = o_v[None, :] * K + o_k[:, None]
    else:
        off = o_k[:, None] * V + o_v[None, :]
    return off


@triton.jit
def _finite_or_zero(x):
    """Non-finite entries (NaN, +-inf) -> 0. Applied to operands whose rows past t may hold an overflowed future
    (an exploding recurrence) before a full-matrix product, where 0 * inf would leak NaN into rows <= t."""
    return tl.where(tl.abs(x) < 3.0e38, x, 0.0)
