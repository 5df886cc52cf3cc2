"""Triton device helpers shared by the stage kernels (intra, gate, WY, state, state CP, recurrent): chunk coordinates of
a program, 16-bit operand casts, tensor-core products with rounded TF32 operands, state offsets in either layout, and a
finite-or-zero guard."""
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


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
def _dot_exact(a, b, acc, PREC: tl.constexpr):
    """`_dot` for operands that TF32 holds exactly (`_tf32_operand`'s results, fp16 values cast to fp32)."""
    if PREC == "tf32rn":
        out = tl.dot(a, b, acc, input_precision="tf32")
    else:
        out = tl.dot(a, b, acc, input_precision=PREC)
    return out


@triton.jit
def _dot(a, b, acc, PREC: tl.constexpr):
    """tl.dot(a, b, acc) at input precision PREC ("ieee", "tf32x3", "tf32", "tf32rn": TF32 on fp32 operands first
    rounded to the nearest TF32 value by `_rn_tf32`, or "tf32split": a so rounded, fp32 b split into its nearest TF32
    value and what that leaves, two TF32 products). acc may be None."""
    if PREC == "tf32split":
        a_rn, b_hi = _rn_tf32(a), _rn_tf32(b)
        out = tl.dot(a_rn, b_hi, acc, input_precision="tf32")
        out = tl.dot(a_rn, _rn_tf32(b - b_hi), out, input_precision="tf32")
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
